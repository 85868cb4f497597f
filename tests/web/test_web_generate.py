"""A language model in the browser: `dlc export` of samples/char_gpt.dl (at a small size, a
few AdamW steps on the corpus with the NumPy reference) copies its vocabulary, and dlc.js's
generate draws the same text as `dlc generate` and `Session.generate` on numpy for the same
seed and weights; its uniform numbers and draws match dlc/generate.py bit for bit; the page
continues a typed prompt a character at a time. The browser tests skip without the browser
(fail in CI)."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import numpy as np
import pytest
from web_helpers import fill_text_form

import dlc
from dlc.cli import main
from dlc.generate import sample, uniform
from dlc.runtime.errors import DlcError
from dlc.text import TextData, Vocab, vocab_path
from dlc.web import export_web

SMALL = {"BLOCK": 16, "L": 2, "H": 2, "D": 8, "C": 16, "P": 0.0}  # as tests/api/test_char_gpt.py
CORPUS = "samples/data/shakespeare.txt"
GPT = "gpt"  # the export's folder under web_root


def small_source() -> str:
    text = pathlib.Path("samples/char_gpt.dl").read_text()
    for name, value in SMALL.items():
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    return text


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    """(model path, weights path, numpy session, vocab): 30 AdamW steps on the corpus."""
    folder = tmp_path_factory.mktemp("gpt")
    model = folder / "gpt.dl"
    model.write_text(small_source())
    sess = dlc.Session(dlc.compile(model), backend="numpy", seed=0)
    data = TextData(CORPUS, block=SMALL["BLOCK"])
    sess.train(data, optimizer=dlc.AdamW(1e-2), batch_size=8, steps=30)
    weights = folder / "gpt.npz"
    sess.save(weights)
    data.vocab.save(vocab_path(weights))
    return model, weights, sess, data.vocab


@pytest.fixture
def gpt_page(gpt, web_root, open_export):
    model, weights, _, _ = gpt
    root, _ = web_root
    if not (root / GPT).exists():
        export_web(model, root / GPT, weights=weights)
    return open_export(GPT)


# -- the export, without a browser ----------------------------------------------------------


def test_export_of_a_language_model_copies_its_vocabulary(gpt, tmp_path, capsys):
    model, weights, _, vocab = gpt
    out = tmp_path / "web"
    assert main(["export", str(model), "--weights", str(weights), "--web", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["web"]["page"] == "text" and m["web"]["vocab"] == "vocab.json"
    copied = Vocab.load(out / "vocab.json")
    assert copied.chars == vocab.chars and copied.block == SMALL["BLOCK"]
    # another vocabulary file, by --vocab
    other = tmp_path / "other.json"
    Vocab(vocab.chars, block=8).save(other)
    assert main(["export", str(model), "--weights", str(weights), "--vocab", str(other), "--web", str(out)]) == 0
    assert Vocab.load(out / "vocab.json").block == 8
    # without one (no weights, nothing beside them): the generic page, no vocab.json
    export_web(model, out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["web"]["page"] == "generic" and m["web"]["vocab"] is None and not (out / "vocab.json").exists()
    capsys.readouterr()


def test_export_refuses_a_vocabulary_that_does_not_fit(gpt, tmp_path):
    model, weights, _, vocab = gpt
    bad = tmp_path / "bad.json"
    Vocab(vocab.chars[:-1], block=16).save(bad)
    with pytest.raises(DlcError, match="holds 75 characters, but the model's logits score 76 tokens"):
        export_web(model, tmp_path / "out", weights=weights, vocab=bad)
    Vocab(vocab.chars).save(bad)
    with pytest.raises(DlcError, match="has no block"):
        export_web(model, tmp_path / "out", weights=weights, vocab=bad)
    bad.write_text('{"format": "dlc-vocab", "kind": "chars", "chars": ["a", "a"], "block": 4}')
    with pytest.raises(DlcError, match="lists a character twice"):
        export_web(model, tmp_path / "out", weights=weights, vocab=bad)
    Vocab(vocab.chars, block=16).save(bad)
    with pytest.raises(DlcError, match="vocabulary of a language model, but generation feeds an input 'tokens'"):
        export_web("samples/quadratic.dl", tmp_path / "out", vocab=bad)
    assert not (tmp_path / "out").exists()


# -- in the browser -------------------------------------------------------------------------

SEEDS = [0, 1, 3, 42, -1, -(2**40) - 7, 2**32 + 5, 2**53 - 1]
STEPS = [0, 1, 7, 255, 2**31, 2**32 - 1]


def test_uniform_and_sample_are_dlc_generate_s_bit_for_bit(gpt_page):
    page = gpt_page
    got = page.call(
        "const { uniform } = await import('./dlc.js');"
        " return arg.seeds.map((s) => arg.steps.map((t) => uniform(s, t)));",
        {"seeds": SEEDS, "steps": STEPS},
    )
    assert got == [[uniform(s, t) for t in STEPS] for s in SEEDS]

    rng = np.random.default_rng(0)
    rows = [rng.normal(size=76).astype(np.float32) * 3 for _ in range(6)]
    rows += [rng.normal(size=300).astype(np.float32)]  # NumPy's pairwise sum past 128 terms
    special = rng.normal(size=20).astype(np.float32)
    special[[2, 9]] = -np.inf
    rows.append(special)
    rows.append(np.where(np.arange(20) == 4, np.inf, special).astype(np.float32))
    rows.append(np.where(np.arange(20) == 6, np.nan, special).astype(np.float32))
    rows.append(np.full(5, -np.inf, np.float32))
    rows.append(np.array([1, 3, 3, 2], np.float32))  # ties: the first largest
    cases = [
        (i, temperature, top_k, uniform(i, j))
        for i in range(len(rows))
        for j, (temperature, top_k) in enumerate([(0, None), (1.0, None), (0.7, 5), (2.0, 1), (1.3, 300), (0.9, 3)])
    ]
    # float32 in JSON: exactly representable doubles; NaN and inf as strings
    special_json = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
    as_json = [[float(x) if np.isfinite(x) else special_json[str(x)] for x in row] for row in rows]
    got = page.call(
        "const { sample } = await import('./dlc.js');"
        " const rows = arg.rows.map((r) => Float32Array.from(r, Number));"
        " return arg.cases.map(([i, t, k, u]) => sample(rows[i], t, k, u));",
        {"rows": as_json, "cases": cases},
    )
    with np.errstate(all="ignore"):
        want = [sample(rows[i], t, k, u) for i, t, k, u in cases]
    assert got == want


def test_generate_in_the_page_is_the_text_of_dlc_generate(gpt, gpt_page, capsys):
    model, weights, sess, vocab = gpt
    prompt = "ROMEO:"  # 6 + 20 characters: the context is cropped to the block (16) from step 11
    want = sess.generate(prompt, 20, vocab=vocab, temperature=0.8, top_k=10, seed=3)
    assert (
        main(
            ["generate", str(model), "--weights", str(weights), "--backend", "numpy", "--prompt", prompt]
            + ["--tokens", "20", "--temperature", "0.8", "--top-k", "10", "--seed", "3"]
        )
        == 0
    )
    assert capsys.readouterr().out == prompt + want + "\n"
    got = gpt_page.call(
        "const seen = []; const text = await m.generateText(arg, {tokens: 20, temperature: 0.8, topK: 10, seed: 3,"
        " onToken: (c) => seen.push(c)}); return [text, seen.join('')];",
        prompt,
    )
    assert got == [want, want]
    # ids in, ids out; temperature 0 is the most likely id each step
    ids = vocab.encode("First").tolist()
    greedy = sess.generate(ids, 8, block=SMALL["BLOCK"], temperature=0)
    assert gpt_page.call("return await m.generate(arg, {tokens: 8, temperature: 0});", ids) == greedy


def test_generate_errors_are_clear(gpt_page):
    def error(body: str) -> str:
        return gpt_page.call(f"try {{ {body}; return 'no error'; }} catch (e) {{ return e.name + ': ' + e.message; }}")

    assert error("await m.generateText('ROMEO~', {tokens: 1})") == (
        'DlcError: the prompt: the character "~" at position 5 is not in the model\'s vocabulary (76 characters)'
    )
    assert "at least one token" in error("await m.generate([], {tokens: 1})")
    assert "prompt[1]: 76 is not a token id (0 to 75)" in error("await m.generate([1, 76], {tokens: 1})")
    assert 'prompt[0]: "R" is not a token id' in error("await m.generate('ROMEO', {tokens: 1})")
    assert "topK a whole number >= 1, not 1 and 0" in error("await m.generate([1], {topK: 0})")
    assert "temperature must be >= 0" in error("await m.generate([1], {temperature: -1})")
    assert "tokens must be a whole number >= 0" in error("await m.generate([1], {tokens: 1.5})")
    assert "seed must be a whole number" in error("await m.generate([1], {seed: 0.5})")


VOCAB_CORRUPT = {  # vocab.json -> what load says
    "twice": ('{"format": "dlc-vocab", "kind": "chars", "chars": ["a", "a"], "block": 4}', "is listed twice"),
    "two": ('{"format": "dlc-vocab", "kind": "chars", "chars": ["ab"], "block": 4}', "chars[0]: a vocabulary entry"),
    "block": (None, "'block' must be the longest context"),
    "size": (None, "75 characters, but the model's logits score 76 tokens"),
    "json": ('{"format": ', "vocab.json: not a vocabulary file"),
    "path": (None, 'web.vocab: "../gpt/vocab.json" is not a plain file name'),  # in the manifest
}


def test_load_refuses_a_corrupted_vocabulary(gpt, gpt_page, web_root):
    _, _, _, vocab = gpt
    root, _ = web_root
    for name, (text, _) in VOCAB_CORRUPT.items():
        folder = root / f"gpt_bad_{name}"
        shutil.copytree(root / GPT, folder, dirs_exist_ok=True)
        if name == "block":
            text = json.dumps({"format": "dlc-vocab", "kind": "chars", "chars": vocab.chars, "block": 0})
        elif name == "size":
            text = json.dumps({"format": "dlc-vocab", "kind": "chars", "chars": vocab.chars[1:], "block": 16})
        if name == "path":
            m = json.loads((folder / "manifest.json").read_text())
            m["web"]["vocab"] = "../gpt/vocab.json"
            (folder / "manifest.json").write_text(json.dumps(m))
        else:
            (folder / "vocab.json").write_text(text)
    got = gpt_page.call(
        "const { load } = await import('./dlc.js'); const out = {};"
        " for (const name of arg) {"
        "  try { await load(`../gpt_bad_${name}/`); out[name] = 'loaded'; }"
        "  catch (e) { out[name] = e.name + ': ' + e.message; } }"
        " return out;",
        list(VOCAB_CORRUPT),
    )
    for name, (_, says) in VOCAB_CORRUPT.items():
        assert got[name].startswith("DlcError: ") and says in got[name], (name, got[name])


def test_the_text_page_continues_a_typed_prompt(gpt, gpt_page, tmp_path):
    _, _, sess, vocab = gpt
    page = gpt_page.page
    assert page.locator("#text").is_visible() and page.locator("#generic").is_hidden()
    prompt = "KING:\nThe"
    fill_text_form(page, prompt, tokens=24, seed=7)
    # each character lands in the page as it is drawn: one text node a token
    page.evaluate(
        "window.added = 0; new MutationObserver((ms) => { for (const r of ms) window.added += r.addedNodes.length; })"
        ".observe(document.getElementById('generated'), {childList: true});"
    )
    page.locator("#generate").click()
    page.wait_for_function("window.dlcPage.generated !== null", timeout=120_000)
    want = sess.generate(prompt, 24, vocab=vocab, temperature=1.0, seed=7)
    assert page.evaluate("window.dlcPage.generated") == want
    assert page.locator("#story").text_content() == prompt + want
    assert page.evaluate("window.added") == 24
    assert page.locator("#error").inner_text() == "" and page.locator("#generate").is_enabled()
    page.screenshot(path=str(tmp_path / "text_page.png"))
    # stop: the run ends early, with the first characters of the same text
    page.locator("#tokens").fill("400")
    page.locator("#generate").click()
    page.wait_for_function("document.getElementById('generated').textContent.length >= 3", timeout=60_000)
    page.locator("#stop").click()
    page.wait_for_function("window.dlcPage.generated !== null", timeout=60_000)
    stopped = page.evaluate("window.dlcPage.generated")
    assert 3 <= len(stopped) < 400 and page.locator("#generated").text_content() == stopped
    assert stopped == sess.generate(prompt, len(stopped), vocab=vocab, temperature=1.0, seed=7)
    # a character outside the vocabulary: said in the page's error line
    page.locator("#prompt").fill("ROMEO~")
    page.locator("#generate").click()
    page.wait_for_function("document.getElementById('error').textContent !== ''")
    assert "'s vocabulary" in page.locator("#error").inner_text()
    assert not gpt_page.errors
