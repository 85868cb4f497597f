"""dlc.js's start-up in headless Chromium: load fetches the weights and shaders.json (one
request for every shader), compiles every program of the model at once but eval's, which
waits for a fetch outside the model's outputs (one program per program of the bundle: the
shaders differing in integer constants alone share one), draws the outputs program's once,
reports progress (and the page shows it), and the model then evaluates as the NumPy
reference does; an export written before shaders.json (its shader files alone) loads and
evaluates the same. Skips without the browser (fails in CI)."""

from __future__ import annotations

import json

import numpy as np
from web_helpers import JS_FEEDS, JS_OUT, feed

import dlc
from dlc.data import load_data
from dlc.web import bundle, export_web

LOAD = """
const { load } = await import(new URL("dlc.js", location.href).href);
const events = [];
const model = await load(".", { onProgress: (p) => events.push([p.stage, p.done, p.total]) });
const programs = model.device.programs.size;
model.dispose();
return { events, programs };
"""


def _files(root, programs) -> set[str]:
    manifest = json.loads((root / "manifest.json").read_text())
    return {p["file"] for name in programs for k in manifest["programs"][name]["kernels"] for p in k["passes"]}


def _distinct_programs(root, programs) -> int:
    """The bundle's programs that the passes of `programs` run."""
    passes = json.loads((root / bundle.FILE).read_text())["passes"]
    return len({passes[f][0] for f in _files(root, programs)})


def _distinct_codes(root, programs) -> int:
    """The distinct codes of their shader files (an export without shaders.json)."""
    return len({bundle.code_of((root / "shaders" / f).read_text()) for f in _files(root, programs)})


def test_load_compiles_every_program_and_reports_progress(web_root, open_export, tmp_path):
    root, _ = web_root
    sess = dlc.Session(dlc.compile("samples/mlp_digits.dl"), backend="numpy", seed=3)
    sess.save(tmp_path / "w.npz")
    export_web("samples/mlp_digits.dl", root / "startup_mlp", weights=tmp_path / "w.npz", optimizer="sgd", lr=0.1)
    page = open_export("startup_mlp")
    got = page.call(LOAD)
    files = [e for e in got["events"] if e[0] == "files"]
    shaders = [e for e in got["events"] if e[0] == "shaders"]
    warm = [e for e in got["events"] if e[0] == "warm-up"]
    assert got["events"] == files + shaders + warm, "the files arrive, then all shaders compile, then the warm-up"
    assert files == [["files", 0, 2], ["files", 1, 2], ["files", 2, 2]]  # weights.bin and shaders.json
    # eval's shaders (every named tensor) wait for a fetch outside the model's outputs
    every = _distinct_programs(root / "startup_mlp", ["outputs", "train"])
    assert every < _distinct_codes(root / "startup_mlp", ["outputs", "train"])  # some shared
    assert shaders[0] == ["shaders", 0, every] and shaders[-1] == ["shaders", every, every]
    assert warm[0] == ["warm-up", 0, _distinct_programs(root / "startup_mlp", ["outputs"])]
    assert warm[-1][1] == warm[-1][2]
    for events in (shaders, warm):
        assert all(a[1] <= b[1] for a, b in zip(events, events[1:]))
    # one program a distinct code, plus the copy, copy4 and pick programs of dlc.js itself
    assert got["programs"] == every + 3
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


def test_an_export_without_a_shader_bundle_loads_its_shader_files(web_root, open_export, tmp_path):
    """The layout before shaders.json: no web.bundle in the manifest, the shaders/ files alone."""
    root, _ = web_root
    sess = dlc.Session(dlc.compile("samples/cnn_digits.dl"), backend="numpy", seed=4)
    sess.save(tmp_path / "w.npz")
    out = export_web("samples/cnn_digits.dl", root / "startup_old", weights=tmp_path / "w.npz")
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["web"]["bundle"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / bundle.FILE).unlink()
    page = open_export("startup_old")
    got = page.call(LOAD)
    requests = len(_files(out, ["outputs", "train"])) + 1  # each shader file, and weights.bin
    assert [e for e in got["events"] if e[0] == "files"][-1] == ["files", requests, requests]
    assert got["programs"] == _distinct_codes(out, ["outputs", "train"]) + 3  # nothing shared
    x = {"pixels": load_data("samples/data/digits_train.npz", sess.model.inputs).arrays["pixels"][:5]}
    out_js = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['probs']); return {JS_OUT};", {"feeds": feed(x)})
    want = sess.eval(["probs"], x)["probs"]
    np.testing.assert_allclose(np.reshape(out_js["probs"]["data"], want.shape), want, rtol=2e-4, atol=2e-5)
    assert not page.errors


STATUS = """window.statuses = [];
new MutationObserver(() => {
  const s = document.getElementById("status");
  if (s && window.statuses[window.statuses.length - 1] !== s.textContent) window.statuses.push(s.textContent);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def test_the_page_shows_the_loads_progress(web_root, browser):
    root, base = web_root
    out = export_web("samples/cnn_digits.dl", root / "startup_page")
    page = browser.new_page()
    try:
        page.add_init_script(STATUS)
        page.goto(f"{base}startup_page/index.html")
        page.wait_for_function("window.dlcPage && (window.dlcPage.ready || window.dlcPage.error)", timeout=120_000)
        statuses = page.evaluate("window.statuses")
    finally:
        page.close()
    every = _distinct_programs(out, ["outputs", "train"])
    warm = _distinct_programs(out, ["outputs"])
    # (a MutationObserver sees the text each task leaves: a stage's last count may be overwritten
    # by the next stage's first in the same task)
    stages = [("fetching files", 2), ("compiling shaders", every), ("preparing shaders", warm)]
    stages = [(f"loading: {what} ", total) for what, total in stages]
    seen = []
    for text in statuses[1:-1]:
        stage = next(i for i, (prefix, _) in enumerate(stages) if text.startswith(prefix))
        done, total = text[len(stages[stage][0]) : -1].split("/")
        assert int(total) == stages[stage][1] and 0 <= int(done) <= int(total) and text.endswith("…"), text
        seen.append(stage)
    assert seen == sorted(seen) and set(seen) == {0, 1, 2}, statuses  # each stage shown, in order
    assert statuses[0] == "loading…" and statuses[-1].startswith("loaded on ")
