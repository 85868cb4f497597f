"""dlc.js's two ways of reading results back: a fence polled between tasks (the first call of
each kind, and any whose GPU work took `blockingReadMs` or more the last time) and a blocking
readPixels (the rest). Both give NumPy's numbers, and the same bits as each other, for float
and i32 outputs and for training losses."""

from __future__ import annotations

import numpy as np
import pytest
from test_web_browser import exported, reference
from web_helpers import JS_FEEDS, feed

import dlc

SAMPLE = "samples/mlp_digits.dl"


def digits_export(web_root, tmp_path, name: str, seed: int, rows: int):
    """The digits MLP's NumPy session, its SGD export under `name` with the same weights, and
    a batch of `rows` (from seed + 1)."""
    sess = reference(SAMPLE, seed=seed)
    np.savez(tmp_path / "w.npz", **sess.params)
    name = exported(web_root, name, SAMPLE, weights=tmp_path / "w.npz", optimizer="sgd", lr=0.1)
    rng = np.random.default_rng(seed + 1)
    data = {"pixels": rng.integers(0, 17, (rows, 64)).astype(np.float32), "labels": rng.integers(0, 10, rows)}
    return sess, name, data


def test_blocking_and_fenced_reads_give_the_same_numbers(web_root, open_export, tmp_path):
    sess, name, data = digits_export(web_root, tmp_path, "reads", seed=2, rows=9)
    want = sess.eval(["probs", "prediction"], data)
    losses = sess.train(data, optimizer=dlc.SGD(0.1), batch_size=9, steps=2, shuffle=False)
    page = open_export(name)
    got = page.call(
        f"{JS_FEEDS} const {{ load }} = await import('./dlc.js');"
        " const run = async (options) => {"
        "   const model = await load('./', options); const calls = [];"
        "   for (let i = 0; i < 3; i++) {"
        "     const before = model.device.blocked;"
        "     const out = await model.eval(feeds, ['probs', 'prediction']);"
        "     calls.push({probs: Array.from(out.probs.data), prediction: Array.from(out.prediction.data),"
        "                 blocked: model.device.blocked - before});"
        "   }"
        "   const before = model.device.blocked; const l1 = await model.train(feeds, {steps: 1, batchSize: 9});"
        "   const l2 = await model.train(feeds, {steps: 1, batchSize: 9});"
        "   const trainBlocked = model.device.blocked - before;"
        "   model.dispose(); return {calls, losses: [...l1, ...l2], trainBlocked};"
        " };"
        " return {always: await run({blockingReadMs: 1e9}), never: await run({blockingReadMs: 0})};",
        {"feeds": feed(data)},
    )
    always, never = got["always"], got["never"]
    # the first call of each kind polls a fence (nothing measured yet), the later ones block
    assert [c["blocked"] for c in always["calls"]] == [0, 1, 1]
    assert always["trainBlocked"] == 1
    assert [c["blocked"] for c in never["calls"]] == [0, 0, 0] and never["trainBlocked"] == 0
    for c in always["calls"] + never["calls"]:
        np.testing.assert_allclose(np.reshape(c["probs"], (9, 10)), want["probs"], rtol=1e-5, atol=1e-6)
        assert c["prediction"] == want["prediction"].tolist()
        assert c == {**always["calls"][0], "blocked": c["blocked"]}  # the same bits either way
    np.testing.assert_allclose(always["losses"], losses, rtol=1e-5, atol=1e-6)
    assert always["losses"] == never["losses"]
    assert not page.errors


@pytest.mark.parametrize("value", ["-1", "'fast'", "NaN"])
def test_a_bad_blocking_read_bound_is_refused(value, web_root, open_export, tmp_path):
    sess = reference(SAMPLE, seed=2)
    np.savez(tmp_path / "w.npz", **sess.params)
    page = open_export(exported(web_root, "reads_bad", SAMPLE, weights=tmp_path / "w.npz"))
    error = page.call(
        "const { load } = await import('./dlc.js');"
        f" try {{ await load('./', {{blockingReadMs: {value}}}); return null; }} catch (e) {{ return e.message; }}"
    )
    assert error and "blockingReadMs must be a number >= 0" in error


def test_updated_params_take_their_temps_texture_without_a_copy_pass(web_root, open_export, tmp_path):
    """mlp_digits' SGD step writes W2's update into a temp (the input gradient reads the old W2
    after it): the step ends with that temp's texture made W2's, no copy pass, and the params
    after three steps, and after a diverged call put back, are NumPy's."""
    sess, name, data = digits_export(web_root, tmp_path, "swaps", seed=4, rows=8)
    losses = sess.train(data, optimizer=dlc.SGD(0.1), batch_size=8, steps=3, shuffle=False)
    page = open_export(name)
    got = page.call(
        f"{JS_FEEDS} const copies = m.manifest.programs.train.copies.map((c) => c.target);"
        " m.device.timings = []; const l1 = await m.train(feeds, {steps: 1, batchSize: 8});"
        " const passes = m.device.timings.map((p) => p.pass); m.device.timings = null;"
        " const l2 = await m.train(feeds, {steps: 2, batchSize: 8});"
        " const params = {}; for (const [n, v] of Object.entries(await m.params())) params[n] = Array.from(v.data);"
        " let error = null;"
        " try { await m.train(feeds, {steps: 2, batchSize: 8, lr: 1e38}); } catch (e) { error = e.message; }"
        " const restored = {}; for (const [n, v] of Object.entries(await m.params())) restored[n] = Array.from(v.data);"
        " return {copies, passes, losses: [...l1, ...l2], params, restored, error};",
        {"feeds": feed(data)},
    )
    assert got["copies"] == ["W2"]
    assert "dlc_copy" not in got["passes"] and len(got["passes"]) > 20
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5, atol=1e-6)
    for n, v in sess.params.items():
        np.testing.assert_allclose(np.reshape(got["params"][n], v.shape), v, rtol=1e-5, atol=1e-6, err_msg=n)
    assert got["error"] and "diverged" in got["error"]
    assert got["restored"] == got["params"]  # bit for bit
    assert not page.errors
