"""dlc.js's start-up in headless Chromium: load compiles every program of the model at once
but eval's, which waits for a fetch outside the model's outputs (one program per distinct
shader code: the text without its comments, which name the kernel), draws the outputs
program's once, reports progress, and the model then evaluates as the NumPy
reference does. Skips without the browser (fails in CI)."""

from __future__ import annotations

import json
import re

import numpy as np
from web_helpers import JS_FEEDS, JS_OUT, feed

import dlc
from dlc.data import load_data
from dlc.web import export_web

LOAD = """
const { load } = await import(new URL("dlc.js", location.href).href);
const events = [];
const model = await load(".", { onProgress: (p) => events.push([p.stage, p.done, p.total]) });
const programs = model.device.programs.size;
model.dispose();
return { events, programs };
"""


def _distinct_sources(root, programs):
    manifest = json.loads((root / "manifest.json").read_text())
    texts = set()
    for name in programs:
        for k in manifest["programs"][name]["kernels"]:
            for p in k["passes"]:
                texts.add(re.sub(r"//[^\n]*", "", (root / "shaders" / p["file"]).read_text()))
    return len(texts)


def test_load_compiles_every_program_and_reports_progress(web_root, open_export, tmp_path):
    root, _ = web_root
    sess = dlc.Session(dlc.compile("samples/mlp_digits.dl"), backend="numpy", seed=3)
    sess.save(tmp_path / "w.npz")
    export_web("samples/mlp_digits.dl", root / "startup_mlp", weights=tmp_path / "w.npz", optimizer="sgd", lr=0.1)
    page = open_export("startup_mlp")
    got = page.call(LOAD)
    shaders = [e for e in got["events"] if e[0] == "shaders"]
    warm = [e for e in got["events"] if e[0] == "warm-up"]
    assert got["events"] == shaders + warm, "all shaders compile before the warm-up draws"
    # eval's shaders (every named tensor) wait for a fetch outside the model's outputs
    every = _distinct_sources(root / "startup_mlp", ["outputs", "train"])
    assert shaders[0] == ["shaders", 0, every] and shaders[-1] == ["shaders", every, every]
    assert warm[0] == ["warm-up", 0, _distinct_sources(root / "startup_mlp", ["outputs"])]
    assert warm[-1][1] == warm[-1][2]
    for events in (shaders, warm):
        assert all(a[1] <= b[1] for a, b in zip(events, events[1:]))
    # one program a distinct code, plus the copy and pick programs of dlc.js itself
    assert got["programs"] == every + 2
    # the page's model, loaded the same way, evaluates and trains as NumPy does
    data = load_data("samples/data/digits_train.npz", sess.model.inputs).arrays
    x = {"pixels": data["pixels"][:7]}
    want = sess.eval(["probs"], x)["probs"]
    out = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['probs']); return {JS_OUT};", {"feeds": feed(x)})
    np.testing.assert_allclose(np.reshape(out["probs"]["data"], want.shape), want, rtol=2e-4, atol=2e-5)
    logits = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['logits']); return {JS_OUT};", {"feeds": feed(x)})[
        "logits"
    ]
    np.testing.assert_allclose(np.reshape(logits["data"], (7, 10)), sess.eval("logits", x), rtol=2e-4, atol=2e-5)
    assert page.call("return [...m.executors.keys()];") == ["outputs", "eval"]
    train = {"pixels": data["pixels"][:16], "labels": data["labels"][:16]}
    losses = page.call(f"{JS_FEEDS} return await m.train(feeds, {{steps: 2, batchSize: 16}});", {"feeds": feed(train)})
    want_losses = sess.train(train, optimizer=dlc.SGD(0.1), batch_size=16, steps=2, shuffle=False)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-4, atol=2e-5)
    assert "loaded on" in page.page.inner_text("#status")
    assert not page.errors


def test_a_progress_callback_that_is_no_function_is_refused(web_root, open_export):
    root, _ = web_root
    export_web("samples/linear.dl", root / "startup_bad")
    page = open_export("startup_bad")
    error = page.call(
        """const { load } = await import(new URL("dlc.js", location.href).href);
        try { await load(".", { onProgress: 3 }); return null; } catch (e) { return e.name + ": " + e.message; }"""
    )
    assert error == "DlcError: onProgress must be a function ({stage, done, total}) => ..."
