"""Generation in the browser with the key/value cache: `dlc export --web` of a language model
the decode pass allows carries the cache's programs (compiler/decode.py's decode step, window
step and transposed weights, for WebGL2), and dlc.js's generate runs the prompt as one
prefill, then one id a step over cache textures, past the block the window. The oracles are
NumPy's: each cached step's logits are the reference's full forward's last row, and the ids
are `dlc generate`'s and `Session.generate`'s on numpy for the same seed and weights (and
dlc.js's own without the cache). A model the decode pass refuses exports without the cache
and generates as before. The browser tests skip without the browser (fail in CI)."""

from __future__ import annotations

import json
import shutil

import numpy as np
from test_generate_cache import REFUSED, REFUSED_SOURCE
from test_web_generate import GPT, SMALL, gpt, gpt_page  # noqa: F401 (fixtures)
from web_helpers import fill_text_form

import dlc
from dlc.cli import main
from dlc.compiler.decode import POS
from dlc.text import Vocab, vocab_path
from dlc.web import export_web

BLOCK = SMALL["BLOCK"]


def test_the_export_carries_the_cache_s_programs(gpt, tmp_path):  # noqa: F811
    model, weights, _, _ = gpt
    out = export_web(model, tmp_path / "web", weights=weights)
    m = json.loads((out / "manifest.json").read_text())
    kv = m["web"]["kv_cache"]
    assert kv["block"] == BLOCK and kv["position"] == POS
    assert {kv["step"], kv["window"], kv["constants"]} <= set(m["programs"]) - {"eval"}
    head = SMALL["C"] // SMALL["H"]
    assert kv["caches"] == {f"$kv{i}": [2, "B", SMALL["H"], BLOCK, head] for i in range(SMALL["L"])}
    assert all(name.startswith("$kv.") and name.endswith(".T") for name in kv["hoisted"])
    step = m["programs"][kv["step"]]
    inputs = {s["name"] for s in step["slots"] if s["kind"] == "input"}
    states = {s["name"] for s in step["slots"] if s["kind"] == "state"}
    assert inputs == {"tokens", POS} and set(kv["caches"]) <= states
    assert {u["target"] for u in step["inplace"] + step["copies"]} == set(kv["caches"])  # the step writes them
    window = m["programs"][kv["window"]]
    assert {s["name"] for s in window["slots"] if s["kind"] == "input"} == {"tokens"}
    assert not window["inplace"] and not window["copies"]
    for p in m["programs"].values():  # every pass's shader is in the folder
        for k in p["kernels"]:
            for q in k["passes"]:
                assert (out / "shaders" / q["file"]).is_file()
    # no vocabulary: no block, no cache
    export_web(model, out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["web"]["kv_cache"] is None and set(m["programs"]) - {"outputs"} == {"eval", "train"}


def test_each_cached_step_s_logits_are_the_numpy_full_forward_s(gpt, gpt_page):  # noqa: F811
    _, _, sess, _ = gpt
    ids = np.random.default_rng(2).integers(0, 76, BLOCK).astype(np.int32)
    chunks = [9, 1, 1, 5]  # a prefill, two steps, a chunk that fills the block; then the window
    got = gpt_page.call(
        "const kv = m.kvCacheFor(arg.block); kv.start(); const out = []; let pos = 0;"
        " for (const n of arg.chunks) {"
        "  out.push(Array.from(await kv.logits(arg.ids.slice(pos, pos + n), pos, arg.block))); pos += n; }"
        " out.push(Array.from(await kv.logits(arg.ids, 0, arg.block))); return out;",
        {"ids": ids.tolist(), "chunks": chunks, "block": BLOCK},
    )
    ends = np.cumsum(chunks).tolist() + [BLOCK]
    for end, logits in zip(ends, got, strict=True):
        want = sess.eval("logits", {"tokens": ids[None, :end]})[0, -1]
        np.testing.assert_allclose(logits, want, rtol=1e-4, atol=1e-4)


def test_cached_generation_is_dlc_generate_s_and_the_uncached_one_s(gpt, gpt_page, capsys):  # noqa: F811
    model, weights, sess, vocab = gpt
    prompt = "ROMEO:"  # 6 + 30 characters: from step 11 every step is a window of the block
    want = sess.generate(prompt, 30, vocab=vocab, temperature=0.8, top_k=10, seed=3)
    argv = ["generate", str(model), "--weights", str(weights), "--backend", "numpy", "--prompt", prompt]
    assert main(argv + ["--tokens", "30", "--temperature", "0.8", "--top-k", "10", "--seed", "3"]) == 0
    assert capsys.readouterr().out == prompt + want + "\n"
    run = (
        "const out = []; for (const cache of [true, false]) {"
        " const text = await m.generateText(arg, {tokens: 30, temperature: 0.8, topK: 10, seed: 3, cache});"
        " out.push([text, m.lastGeneration]); } return out;"
    )
    (cached, with_cache), (uncached, without) = gpt_page.call(run, prompt)
    assert cached == want and uncached == want
    # one prefill of the prompt, one id a step up to the block, then windows (nanoGPT's crop)
    assert with_cache == {"cache": True, "prefills": 1, "steps": 10, "windows": 19}
    assert without == {"cache": False, "prefills": 0, "steps": 0, "windows": 30}

    # a prompt longer than the block (its last 16 ids: a window first), greedy ids, a shorter
    # block than the cache's rows, and one token
    ids = vocab.encode("First Citizen: Before we proceed").tolist()
    cases = [(ids, 12, BLOCK, 0.0), (ids[:3], 12, 8, 1.0), (ids[:5], 1, BLOCK, 1.0)]
    got = gpt_page.call(
        "const out = []; for (const [ids, tokens, block, temperature] of arg) {"
        " out.push([await m.generate(ids, {tokens, block, temperature, seed: 9}), m.lastGeneration]); }"
        " return out;",
        cases,
    )
    for (prompt_ids, tokens, block, temperature), (drawn, stats) in zip(cases, got, strict=True):
        assert drawn == sess.generate(prompt_ids, tokens, block=block, temperature=temperature, seed=9)
        assert stats["cache"] is True
    assert got[0][1]["windows"] == 12 and got[1][1]["prefills"] == 1 and got[2][1]["prefills"] == 1
    assert "cache must be true or false" in gpt_page.call(
        "try { await m.generate([1], {cache: 1}); return ''; } catch (e) { return e.message; }"
    )
    assert not gpt_page.errors


def test_a_block_longer_than_the_cache_s_rows_generates_without_it(gpt, tmp_path, web_root, open_export):  # noqa: F811
    model, weights, sess, vocab = gpt
    root, _ = web_root
    short = tmp_path / "short.json"
    Vocab(vocab.chars, block=8).save(short)
    export_web(model, root / "gpt_short", weights=weights, vocab=short)  # a cache of 8 rows
    page = open_export("gpt_short")
    ids = vocab.encode("First").tolist()
    got = page.call(
        "const out = []; for (const block of [8, 16]) {"
        " out.push([await m.generate(arg, {tokens: 20, block, seed: 1}), m.lastGeneration.cache]); } return out;",
        ids,
    )
    assert got == [[sess.generate(ids, 20, block=b, seed=1), b == 8] for b in (8, 16)]


def test_after_training_in_the_page_the_cache_reads_the_new_params(gpt, gpt_page):  # noqa: F811
    # each generation transposes the weights again (kv_constants) from the params as they are
    _, _, _, vocab = gpt
    ids = vocab.encode("To be, or not to be, that is the question").astype(np.int32)
    windows = np.stack([ids[i : i + BLOCK + 1] for i in range(0, 24, 3)])
    got = gpt_page.call(
        "const before = await m.generate(arg.prompt, {tokens: 24, seed: 2});"
        " const losses = await m.train({tokens: {data: Int32Array.from(arg.x), shape: arg.shape},"
        "  targets: {data: Int32Array.from(arg.y), shape: arg.shape}}, {steps: 5, lr: 0.5});"
        " const cached = await m.generate(arg.prompt, {tokens: 24, seed: 2});"
        " const uncached = await m.generate(arg.prompt, {tokens: 24, seed: 2, cache: false});"
        " return [before, losses, cached, uncached];",
        {
            "prompt": ids[:4].tolist(),
            "x": windows[:, :-1].ravel().tolist(),
            "y": windows[:, 1:].ravel().tolist(),
            "shape": [len(windows), BLOCK],
        },
    )
    before, losses, cached, uncached = got
    assert len(losses) == 5 and all(np.isfinite(losses))
    assert cached == uncached and cached != before


def test_the_page_s_cache_box_gives_the_same_text(gpt, gpt_page):  # noqa: F811
    _, _, sess, vocab = gpt
    page = gpt_page.page
    assert page.locator("#cache").is_checked() and page.locator("#cache").is_enabled()
    prompt = "KING:"
    fill_text_form(page, prompt, tokens=20, seed=4)
    want = sess.generate(prompt, 20, vocab=vocab, temperature=1.0, seed=4)
    for checked in (True, False):
        page.locator("#cache").set_checked(checked)
        page.locator("#generate").click()
        page.wait_for_function("window.dlcPage.generated !== null", timeout=120_000)
        assert page.evaluate("window.dlcPage.generated") == want
        assert page.evaluate("window.dlcPage.model.lastGeneration.cache") is checked
        page.wait_for_function("!document.getElementById('generate').disabled")
    assert page.locator("#error").inner_text() == ""


def test_a_model_the_decode_pass_refuses_exports_without_a_cache_and_generates(tmp_path, web_root, open_export):
    root, _ = web_root
    model = tmp_path / "sum.dl"
    model.write_text(REFUSED_SOURCE)  # logits = x + sum(x over T): each position sees the others
    sess = dlc.Session(dlc.compile(model), backend="numpy", seed=0)
    weights = tmp_path / "sum.npz"
    sess.save(weights)
    vocab = Vocab(list("abcdefghijk"), block=8)
    vocab.save(vocab_path(weights))
    export_web(model, root / "gpt_refused", weights=weights)
    m = json.loads((root / "gpt_refused" / "manifest.json").read_text())
    assert REFUSED["a sum over T"][1] in m["web"]["kv_cache"]["refused"]
    assert set(m["programs"]) - {"outputs"} == {"eval"}
    page = open_export("gpt_refused")
    text, stats, kv, why = page.call(
        "const text = await m.generateText('abc', {tokens: 12, temperature: 0.9, seed: 5});"
        " return [text, m.lastGeneration, m.kvCache, m.kvCacheRefused];"
    )
    assert text == sess.generate("abc", 12, vocab=vocab, temperature=0.9, seed=5)
    assert stats["cache"] is False and kv is None and "reduces over T" in why
    assert page.page.locator("#cache").is_disabled() and not page.page.locator("#cache").is_checked()


KV_CORRUPT = {  # web.kv_cache edited -> what load says
    "step": (lambda kv: kv.update(step="nope"), 'web.kv_cache.step: "nope" is not a program of the export'),
    "eval": (lambda kv: kv.update(window="eval"), 'web.kv_cache.window: "eval" is not a program'),
    "block": (lambda kv: kv.update(block=0), "web.kv_cache.block: must be a whole number >= 1"),
    "position": (lambda kv: kv.update(position="tokens"), "web.kv_cache.position"),
    "caches": (lambda kv: kv.update(caches=[1]), "web.kv_cache.caches: must be an object"),
    "shape": (lambda kv: kv["caches"].update({"$kv0": [2, -1]}), "web.kv_cache.caches.$kv0[1]"),
    "refused": (lambda kv: (kv.clear(), kv.update(refused=3)), "web.kv_cache.refused: must be a string"),
}


def test_load_refuses_a_corrupted_cache_section(gpt_page, web_root):  # noqa: F811
    root, _ = web_root
    for name, (edit, _) in KV_CORRUPT.items():
        folder = root / f"gpt_kv_{name}"
        shutil.copytree(root / GPT, folder, dirs_exist_ok=True)
        m = json.loads((folder / "manifest.json").read_text())
        edit(m["web"]["kv_cache"])
        (folder / "manifest.json").write_text(json.dumps(m))
    got = gpt_page.call(
        "const { load } = await import('./dlc.js'); const out = {};"
        " for (const name of arg) {"
        "  try { await load(`../gpt_kv_${name}/`); out[name] = 'loaded'; }"
        "  catch (e) { out[name] = e.name + ': ' + e.message; } }"
        " return out;",
        list(KV_CORRUPT),
    )
    for name, (_, says) in KV_CORRUPT.items():
        assert got[name].startswith("DlcError: ") and says in got[name], (name, got[name])
