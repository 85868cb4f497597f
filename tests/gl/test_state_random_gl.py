"""Model state and randomness on GL: the random ops draw the same bits on NumPy, the compute
target and the texture target (masks compared exactly), the step counter and the running
statistics advance on the GPU, and the samples train as PyTorch does on GL compute."""

from __future__ import annotations

import numpy as np
import pytest
from state_oracles import compare_mlp_dropout, compare_resnet, drawn, random_nodes

import dlc

pytestmark = pytest.mark.gl

TARGETS = [("numpy", None), ("gl", "compute"), ("gl", "texture")]

MODEL = """
input x: [B, 6]
input y: [B, 3]
param W: [6, 3] = glorot
param g: [3] = ones
param b: [3] = zeros
state m: [3] = zeros
state v: [3] = ones
h = batch_norm(dropout(x, 0.3) @ W, g, b, mean=m, var=v)
noise = random_normal([B, 3])
loss cost = mean_squared(h + 0.01 * noise, y)
"""


def digits(n: int) -> dict:
    data = dict(np.load("samples/data/digits_train.npz"))
    return {k: v[:n] for k, v in data.items()}


def test_masks_noise_and_state_are_the_same_on_every_target(gl):
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(7, 6)).astype(np.float32), "y": rng.normal(size=(7, 3)).astype(np.float32)}
    runs = {}
    for backend, target in TARGETS:
        sess = dlc.Session(MODEL, backend=backend, target=target, seed=42)
        uniform, normal = random_nodes(sess.model.graph)
        draws, losses = [], []
        for _ in range(3):
            draws.append((drawn(sess, uniform, {"B": 7}), drawn(sess, normal, {"B": 7})))
            losses += sess.train(feeds, optimizer=dlc.Adam(0.01), steps=1, batch_size=None, shuffle=False)
        runs[target] = draws, losses, sess.states, sess.eval("h", feeds)
    want_draws, want_losses, want_states, want_h = runs[None]
    for target in ("compute", "texture"):
        draws, losses, states, h = runs[target]
        for (u, z), (wu, wz) in zip(draws, want_draws):
            np.testing.assert_array_equal(u, wu, err_msg=target)  # the same bits: exactly
            np.testing.assert_array_equal(u >= np.float32(0.3), wu >= np.float32(0.3), err_msg=target)
            np.testing.assert_allclose(z, wz, rtol=1e-5, atol=1e-5, err_msg=target)
        assert not np.array_equal(draws[0][0], draws[1][0])  # a new mask each step
        np.testing.assert_allclose(losses, want_losses, rtol=1e-5, err_msg=target)
        assert states["$step"] == 3
        for name in ("m", "v"):
            np.testing.assert_allclose(states[name], want_states[name], rtol=1e-5, atol=1e-6, err_msg=target)
        np.testing.assert_allclose(h, want_h, rtol=1e-4, atol=1e-5, err_msg=target)


def test_resnet_bn_sample_matches_torch_on_gl(gl):
    got, want, states, torch_states, logits, torch_logits = compare_resnet(
        dlc.Session("samples/resnet_bn.dl", backend="gl", target="compute"), digits(16), steps=3
    )
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for name, value in torch_states.items():
        np.testing.assert_allclose(states[name], value, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(logits, torch_logits, rtol=1e-3, atol=1e-4)


def test_mlp_dropout_sample_matches_torch_on_gl(gl):
    sess = dlc.Session("samples/mlp_dropout.dl", backend="gl", target="compute")
    got, want, masks = compare_mlp_dropout(sess, digits(32), 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert not np.array_equal(masks[0], masks[1])


def test_deferred_steps_advance_the_counter_on_the_gpu(gl):
    # train() on compute runs many steps with no host write between them (dlc/deferred.py):
    # the step counter and running statistics are updated on the GPU, as the reference does.
    data = digits(64)
    out = {}
    for backend, target in TARGETS[:2]:
        sess = dlc.Session("samples/mlp_dropout.dl", backend=backend, target=target, seed=3)
        losses = sess.train(data, optimizer=dlc.Adam(0.01), steps=6, batch_size=16)
        out[backend] = losses, sess.states["$step"]
    np.testing.assert_allclose(out["gl"][0], out["numpy"][0], rtol=1e-4)
    assert out["gl"][1] == out["numpy"][1] == 6


def test_a_compiled_artifact_trains_with_dropout_as_the_model_does(gl, tmp_path):
    from dlc.compiler.emit import write_artifact

    write_artifact(
        dlc.compile("samples/mlp_dropout.dl"), tmp_path / "art", train_loss="cost", optimizer=dlc.Adam(0.001)
    )
    data = digits(32)
    art = dlc.Session(str(tmp_path / "art"), backend="gl")
    ref = dlc.Session("samples/mlp_dropout.dl", backend="numpy")
    got = art.train(data, steps=3, batch_size=None, shuffle=False)
    want = ref.train(data, optimizer=dlc.Adam(0.001), steps=3, batch_size=None, shuffle=False)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert art.backend.get_leaf("$step") == 3


def test_an_eval_artifact_reads_the_models_state(gl, tmp_path):
    from dlc.compiler.emit import write_artifact

    data = digits(20)
    sess = dlc.Session("samples/resnet_bn.dl", backend="numpy")
    sess.train(data, optimizer=dlc.Adam(0.01), steps=2, batch_size=None)
    write_artifact(sess.model, tmp_path / "bn")
    sess.save(tmp_path / "w.npz")
    art = dlc.Session(str(tmp_path / "bn"), backend="gl")
    art.load(tmp_path / "w.npz")  # the running statistics too
    for name, value in sess.states.items():
        np.testing.assert_array_equal(art.states[name], value)
    np.testing.assert_allclose(art.eval("logits", data), sess.eval("logits", data), rtol=1e-4, atol=1e-5)
