"""The conv and pool options as the language writes them, on GL against the NumPy reference:
a small net with dilation, explicit padding, groups, a depthwise conv, padded pools and a
global pool; its outputs and its gradients (the registry sweep covers each op alone)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

pytestmark = pytest.mark.gl

NET = """
input x: [B, 9, 7, 4]
param w1: [3, 3, 2, 6] = he
param w2: [3, 3, 1, 6] = he
param w3: [2, 3, 6, 5] = he
param b3: [5]
param P: [6, 5]
h1 = relu(conv2d(x, w1, stride=[2, 1], padding=[1, 0, 2, 1], dilation=[1, 2], groups=2))
h2 = conv2d(h1, w2, groups=6, dilation=2)
p1 = max_pool(h2, [3, 2], stride=[2, 1], padding=[1, 1, 0, 1])
p2 = avg_pool(p1, 2, stride=1, padding=[1, 0, 1, 0], count_include_pad=true)
h3 = conv2d(p2, w3, padding="valid") + b3
g = global_avg_pool(h3) + global_max_pool(p1 * 0.5) @ P
loss cost = sum(g * g)
"""


def test_options_net_forward_and_gradients_match_numpy(gl):
    m = dlc.compile(NET)
    feeds = {"x": np.random.default_rng(1).normal(size=(3, 9, 7, 4)).astype(np.float32)}
    ref = dlc.Session(m, backend="numpy", seed=0)
    run = dlc.Session(m, backend="gl", seed=0)
    for name in ("h1", "h2", "p1", "p2", "h3", "g"):
        want = ref.eval(name, feeds)
        np.testing.assert_allclose(
            run.eval(name, feeds), want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()), err_msg=name
        )
    want, got = ref.gradients(feeds), run.gradients(feeds)
    for name in want:
        np.testing.assert_allclose(
            got[name], want[name], rtol=1e-3, atol=1e-4 * float(np.abs(want[name]).max()), err_msg=name
        )
