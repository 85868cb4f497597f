"""One driver: the same Session.train over the three backends (the NumPy reference, GL over
the model, GL over its compiled artifact) gives the same losses and params; dlc.load gives a
Session."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.backends.artifact import ArtifactBackend
from dlc.backends.gl import GLBackend
from dlc.backends.protocol import Backend, live_gl_backends
from dlc.backends.reference import NumpyBackend
from dlc.compiler.emit import write_artifact

pytestmark = pytest.mark.gl

MODEL = """input x: [B, 4]
input y: [B, 2]
param W: [4, 2] = normal(0.5)
param b: [2] = 0
pred = tanh(matmul(x, W) + b)
loss cost = mean(square(pred - y))
"""


def data(n: int = 24) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(4, 2))).astype(np.float32)
    return {"x": x, "y": y}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    model = dlc.compile(MODEL)
    out = tmp_path_factory.mktemp("one") / "m.dlc"
    write_artifact(model, out, train_loss="cost", optimizer=dlc.Adam(0.05), batch_size=8)
    return model, out


def test_the_same_train_gives_the_same_params_on_three_backends(gl, compiled):
    model, out = compiled
    sessions = {
        "numpy": dlc.Session(model, backend="numpy", seed=0),
        "gl": dlc.Session(model, backend="gl", seed=0),
        "artifact": dlc.load(out),
    }
    assert isinstance(sessions["numpy"].backend, NumpyBackend)
    assert isinstance(sessions["gl"].backend, GLBackend)
    assert isinstance(sessions["artifact"].backend, ArtifactBackend)
    for s in sessions.values():
        assert isinstance(s.backend, Backend)
    start = sessions["numpy"].params
    for s in sessions.values():  # the artifact holds the params of seed 0
        for name, v in start.items():
            np.testing.assert_array_equal(s.params[name], v)
    feeds = data()
    seen: dict[str, list] = {}
    losses = {}
    for kind, s in sessions.items():
        seen[kind] = []
        optimizer = None if kind == "artifact" else dlc.Adam(0.05)  # the artifact's: compiled
        losses[kind] = s.train(
            feeds,
            optimizer=optimizer,
            batch_size=8,
            epochs=3,
            callback=lambda step, epoch, loss, n, kind=kind: seen[kind].append((step, epoch, n)),
        )
    assert len(losses["numpy"]) == 9 and losses["numpy"][-1] < losses["numpy"][0]
    for kind in ("gl", "artifact"):
        assert seen[kind] == seen["numpy"]
        np.testing.assert_allclose(losses[kind], losses["numpy"], rtol=1e-4, err_msg=kind)
        for name, v in sessions["numpy"].params.items():
            np.testing.assert_allclose(sessions[kind].params[name], v, rtol=1e-4, atol=1e-6, err_msg=f"{kind} {name}")
        got = sessions[kind].eval(["pred", "cost"], feeds)
        want = sessions["numpy"].eval(["pred", "cost"], feeds)
        np.testing.assert_allclose(got["pred"], want["pred"], rtol=1e-4, atol=1e-6)
    for s in sessions.values():
        s.close()


def test_dlc_load_returns_a_session_with_the_runner_surface(gl, compiled, tmp_path):
    model, out = compiled
    s = dlc.load(out)
    assert isinstance(s, dlc.Session) and s.backend.name == "gl"
    assert s.inputs == {"x": ("B", 4), "y": ("B", 2)}
    assert s.model.params == {"W": (4, 2), "b": (2,)}
    assert list(s.losses) == ["cost"] and s.tensors["pred"] == ("B", 2)
    assert s.needed_inputs(["pred"]) == {"x"} and s.needed_inputs(["cost"]) == {"x", "y"}
    w = tmp_path / "w.npz"
    s.save(w)
    s.train(data(), batch_size=8, steps=2)
    s.load(w)
    np.testing.assert_array_equal(s.params["W"], dlc.Session(model, backend="numpy").params["W"])
    held = s.memory()
    assert held["params"][0] == 2 and held["state"][0] >= 2  # W, b; Adam's moments and step
    assert s.backend in live_gl_backends()  # dlc.memory() counts an artifact's session too
    with pytest.raises(dlc.DlcError, match="compiled with the adam optimizer, not sgd"):
        s.train(data(), optimizer=dlc.SGD(0.1))
    with pytest.raises(dlc.DlcError, match="compiled to train loss 'cost', not 'pred'"):
        s.train(data(), loss="pred")
    with pytest.raises(dlc.DlcError, match="gradients\\(\\) needs the model's graph"):
        s.gradients(data())
    s.close()
    # The same folder as a Session directly, and on the reference (its model.dl, its params).
    assert isinstance(dlc.Session(out).backend, ArtifactBackend)
    ref = dlc.Session(out, backend="numpy")
    assert isinstance(ref.backend, NumpyBackend)
    np.testing.assert_array_equal(ref.params["W"], dlc.Session(model, backend="numpy").params["W"])
    with pytest.raises(dlc.DlcError, match="compiled for the compute target, not texture"):
        dlc.Session(out, target="texture")


def test_an_artifact_without_a_training_step_says_so(gl, tmp_path):
    out = write_artifact(dlc.compile(MODEL), tmp_path / "eval.dlc")
    s = dlc.load(out)
    assert float(s.eval("cost", data(4))) > 0
    with pytest.raises(dlc.DlcError, match="compiled without a training step"):
        s.train(data(4))
    s.close()
