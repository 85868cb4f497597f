"""defs, loops, frozen params and `inf` on GL (compute and texture targets) against the NumPy
reference: the model written with def + for gives the flat model's values and gradients,
a frozen param stays bitwise the same while the others train, and `-inf` masks a softmax."""

from __future__ import annotations

import numpy as np
import pytest
from blocks_models import BLOCKS, FLAT, PARAMS, feeds

import dlc

pytestmark = pytest.mark.gl

TARGETS = ["compute", "texture"]


@pytest.mark.parametrize("target", TARGETS)
def test_blocks_match_the_flat_model_and_the_reference(gl, target):
    f = feeds(5)
    ref = dlc.Session(dlc.compile(FLAT), backend="numpy", seed=1)
    s = dlc.Session(dlc.compile(BLOCKS), backend="gl", target=target, seed=1)
    np.testing.assert_allclose(s.eval("h", f), ref.eval("h3", f), rtol=1e-5, atol=1e-6)
    g, want = s.gradients(f), ref.gradients(f)
    for p in PARAMS:
        np.testing.assert_allclose(g[p], want[p], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_freeze_keeps_params_bitwise_on_gl(gl, target):
    s = dlc.Session(dlc.compile(BLOCKS), backend="gl", target=target, freeze=["h.1.*"])
    before = {k: np.array(v) for k, v in s.params.items()}
    s.train(feeds(8), optimizer=dlc.Adam(0.05), steps=2, batch_size=8)
    for p in PARAMS:
        assert np.array_equal(s.params[p], before[p]) == p.startswith("h.1."), p


@pytest.mark.parametrize("target", TARGETS)
def test_minus_inf_masks_a_softmax_on_gl(gl, target):
    src = "input x: [B, 3]\ninput keep: [B, 3]\nout = softmax(where(keep > 0, x, -inf))\nlow = min(x, axis=1) - inf\n"
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], np.float32)
    keep = np.array([[1, 1, 0], [0, 1, 1]], np.float32)
    want = dlc.Session(dlc.compile(src), backend="numpy")
    s = dlc.Session(dlc.compile(src), backend="gl", target=target)
    for name in ("out", "low"):
        got, ref = s.eval(name, {"x": x, "keep": keep}), want.eval(name, {"x": x, "keep": keep})
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    assert s.eval("out", {"x": x, "keep": keep})[0, 2] == 0.0
    assert np.all(np.isneginf(s.eval("low", {"x": x, "keep": keep})))
