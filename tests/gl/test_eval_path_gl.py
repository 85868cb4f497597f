"""Session.eval / predict's prepared path (dlc/eval_plan.py) and the one-wait readback of the
fetches (runtime/readback.py): values against the NumPy reference, NaN and inf included,
and feeds that change shape, type or validity between calls are checked again."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc import eval_plan
from dlc.compiler.emit import write_artifact
from dlc.runtime.errors import DataError, DlcError

QUADRATIC = "samples/quadratic.dl"
CLASSIFIER = """
input pixels: [B, 4]
input labels: [B]
param W: [4, 3] = glorot
param b: [3] = zeros
logits = pixels @ W + b
probs = softmax(logits)
prediction = argmax(logits)
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
accuracy = mean(prediction == labels)
"""


def _pair(model, seed=0):
    return dlc.Session(model, backend="gl", seed=seed), dlc.Session(model, backend="numpy", seed=seed)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_eval_matches_numpy_call_after_call_with_nan_and_inf(gl):
    gl_sess, ref = _pair(QUADRATIC)
    rng = np.random.default_rng(1)
    for n in (11, 11, 5, 11):  # same shapes (the fast path), then another batch size and back
        x = rng.uniform(-2, 2, n).astype(np.float32)
        y = rng.uniform(-2, 2, n).astype(np.float32)
        got, want = gl_sess.eval(["y", "cost"], {"x": x, "y_label": y}), ref.eval(["y", "cost"], {"x": x, "y_label": y})
        assert got["y"].shape == (n,) and got["cost"].shape == ()
        _close(got["y"], want["y"])
        _close(got["cost"], want["cost"])
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    got, want = gl_sess.eval("y", {"x": x}), ref.eval("y", {"x": x})
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    _close(got[~np.isnan(got)], want[~np.isnan(want)])
    gl_sess.close()


def test_repeated_feeds_skip_the_checks_and_a_bad_feed_is_still_refused(gl, monkeypatch):
    sess = dlc.Session(QUADRATIC, backend="gl", seed=0)
    checks = []
    real = eval_plan.prepare
    monkeypatch.setattr(eval_plan, "prepare", lambda *a, **k: checks.append(1) or real(*a, **k))
    x = np.linspace(-1, 1, 7, dtype=np.float32)
    first = sess.eval("y", {"x": x})
    for _ in range(3):
        np.testing.assert_array_equal(sess.eval("y", {"x": x}), first)
    assert len(checks) == 1
    _close(sess.eval("y", {"x": 2 * x}), sess.eval("y", {"x": (2 * x).astype(np.float64)}))  # a float64 feed: checked
    assert len(checks) == 2
    with pytest.raises(DataError, match="'x'"):
        sess.eval("y", {"x": x.reshape(7, 1)})  # same name, another rank
    with pytest.raises(DataError, match="missing"):
        sess.eval("y", {"y_label": x})  # same count of feeds, another name
    np.testing.assert_array_equal(sess.eval("y", {"x": x}), first)  # and it goes on
    sess.close()


def test_predict_fetches_the_outputs_the_feeds_suffice_for(gl):
    gl_sess, ref = _pair(CLASSIFIER, seed=3)
    rng = np.random.default_rng(2)
    pixels = rng.normal(size=(6, 4)).astype(np.float32)
    labels = rng.integers(0, 3, 6).astype(np.float32)
    got = gl_sess.predict({"pixels": pixels})
    assert list(got) == ["probs", "prediction"]  # accuracy needs labels
    want = ref.predict({"pixels": pixels})
    for name in got:
        _close(got[name], want[name])
    both = gl_sess.predict({"pixels": pixels, "labels": labels})
    assert list(both) == ["probs", "prediction", "accuracy"]
    _close(both["accuracy"], ref.eval("accuracy", {"pixels": pixels, "labels": labels}))
    _close(gl_sess.predict({"pixels": pixels}, "probs"), want["probs"])
    with pytest.raises(DlcError, match="'pixels'"):
        gl_sess.predict({"labels": labels})
    gl_sess.close()


def test_predict_over_an_artifact_matches_the_model(gl, tmp_path):
    model = dlc.compile(CLASSIFIER)
    out = write_artifact(model, tmp_path / "c.dlc")
    sess, ref = dlc.Session(out), dlc.Session(out, backend="numpy")
    pixels = np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32)
    for _ in range(2):
        got, want = sess.predict({"pixels": pixels}), ref.predict({"pixels": pixels})
        assert list(got) == ["probs", "prediction"]
        for name in got:
            _close(got[name], want[name])
    sess.close()


def test_model_outputs():
    assert eval_plan.model_outputs(dlc.compile(QUADRATIC).graph) == ["y"]
    assert eval_plan.model_outputs(dlc.compile(CLASSIFIER).graph) == ["probs", "prediction", "accuracy"]


def test_one_readback_serves_many_fetches_and_is_freed(gl):
    from dlc.runtime.storage import live_buffers

    before = live_buffers()
    sess = dlc.Session(CLASSIFIER, backend="gl", seed=1)
    pixels = np.ones((3, 4), np.float32)
    sess.eval(["logits", "probs", "prediction"], {"pixels": pixels})
    (_, _, executor), *_ = sess.backend._programs.values()
    assert executor._readback and executor._readback.floats >= 3 * 3 + 3 * 3 + 3
    sess.close()
    assert live_buffers() == before


def test_predict_of_an_imported_model_matches_onnx_reference(gl):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    b = rng.normal(size=3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Softmax", ["h"], ["probs"], axis=1)],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    imported = dlc.import_onnx(model)
    sess = dlc.Session(imported.model, backend="gl")
    sess.set_params(imported.weights)
    reference = ReferenceEvaluator(model)
    for n in (2, 2, 5):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        got = sess.predict({imported.inputs["x"]: x}, imported.outputs["probs"])
        _close(got, reference.run(None, {"x": x})[0])
    sess.close()


def test_an_eval_program_is_planned_per_class_of_batch_size(gl):
    """Batch 1 and batch 32 each get a program planned at their own size (its tiles chosen
    there) once their class comes a second time; sizes of one class share it; values match
    NumPy either way; training programs too (batches 8 and 3 are one class)."""
    from dlc.backends.gl import batch_class

    assert [batch_class(n) for n in (1, 2, 15, 16, 127, 128, 1023, 1024)] == [0, 1, 1, 2, 2, 3, 3, 4]
    gl_sess, ref = _pair(CLASSIFIER, seed=3)
    rng = np.random.default_rng(2)
    # a class's first call is served by another class's program, its second compiles its own
    for n, programs in ((1, 1), (32, 1), (20, 2), (1, 2), (5, 2), (5, 3), (7, 3)):
        pixels = rng.normal(size=(n, 4)).astype(np.float32)
        _close(gl_sess.eval("probs", {"pixels": pixels}), ref.eval("probs", {"pixels": pixels}))
        assert len(gl_sess.backend._programs) == programs, n
    for n in (8, 3):
        labels = rng.integers(0, 3, n).astype(np.float32)
        feeds = {"pixels": rng.normal(size=(n, 4)).astype(np.float32), "labels": labels}
        gl_sess.train(feeds, batch_size=n, steps=1, optimizer=dlc.SGD(0.1))
    assert len(gl_sess.backend._programs) == 4  # one training program for batches 8 and 3 (one class)
    gl_sess.close()
