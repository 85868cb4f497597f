"""A web export read as untrusted input in headless Chromium: dlc.js refuses a corrupted
manifest.json, weights.bin or shaders.json at load with a DlcError naming the field, leaf or
entry (never loading wrong weights or shaders, never a RangeError), and the page shows
manifest names as text, never markup. Skips without the browser (fails in CI)."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from dlc.runtime.errors import DataError
from dlc.web import bundle, export_web

GOOD = "untrusted_good"


def _leaves(m: dict) -> dict:
    return m["web"]["weights"]["leaves"]


def _set(path: list, value):
    def edit(m: dict) -> None:
        for key in path[:-1]:
            m = m[key]
        m[path[-1]] = value

    return edit


def _float_at(leaf: str, index: int, value: float):
    """weights.bin with element `index` of `leaf` set to `value`."""

    def edit(blob: bytearray, m: dict) -> None:
        struct.pack_into("<f", blob, _leaves(m)[leaf]["offset"] + 4 * index, value)

    return edit


# name -> (edit of the manifest, edit of weights.bin, what the DlcError says)
CORRUPT = {
    "missing_param": (lambda m: _leaves(m).pop("W2"), None, "no leaf for param 'W2' [64, 10]"),
    "missing_state": (lambda m: _leaves(m).pop("W1$m"), None, "no leaf for optimizer state 'W1$m' [64, 64]"),
    "extra_leaf": (
        lambda m: _leaves(m).update(W3=dict(_leaves(m)["b2"])),
        None,
        "leaf 'W3' is not a param or optimizer state of the model",
    ),
    "wrong_shape": (
        lambda m: _leaves(m)["W1"].update(shape=[64, 10], count=640),
        None,
        "web.weights.leaves.W1.shape: leaf 'W1' has shape [64, 10], but param 'W1' is [64, 64]",
    ),
    "wrong_count": (
        _set(["web", "weights", "leaves", "b1", "count"], 63),
        None,
        "leaf 'b1' has count 63, but its shape [64] holds 64",
    ),
    "offset_text": (
        _set(["web", "weights", "leaves", "b1", "offset"], "16384"),
        None,
        "leaf 'b1' has offset \"16384\"",
    ),
    "offset_odd": (
        _set(["web", "weights", "leaves", "b1", "offset"], 16386),
        None,
        "leaf 'b1' has offset 16386, not a whole multiple of 4",
    ),
    # the params stored 4 values a texel: params of the model, of whole texels
    "packed_unknown": (_set(["web", "packed"], ["W9"]), None, 'web.packed: "W9" is not a param of the model'),
    "packed_odd": (_set(["web", "packed"], ["b2"]), None, "param 'b2' [10] is no whole number of texels of 4"),
    "offset_past_end": (
        lambda m: _leaves(m)["b2"].update(offset=m["web"]["weights"]["bytes"] - 4),
        None,
        "leaf 'b2' spans bytes",
    ),
    "overlap": (
        _set(["web", "weights", "leaves", "b1", "offset"], 4),
        None,
        "leaves 'W1' (bytes 0 to 16384) and 'b1' (bytes 4 to 260) overlap",
    ),
    "nan": (None, _float_at("W2", 5, float("nan")), "weights.bin: leaf 'W2' holds NaN at index 5"),
    "inf_state": (None, _float_at("W1$v", 0, float("inf")), "weights.bin: leaf 'W1$v' holds Infinity at index 0"),
    "truncated": (None, lambda blob, m: blob.__delitem__(slice(-8, None)), "weights.bin holds"),
    "weights_elsewhere": (
        _set(["web", "weights", "file"], "../untrusted_good/weights.bin"),
        None,
        "web.weights.file: ",
    ),
    "shader_elsewhere": (
        _set(["programs", "eval", "kernels", 0, "passes", 0, "file"], "https://example.com/x.frag"),
        None,
        'programs.eval.kernels[0].passes[0].file: "https://example.com/x.frag" is not a plain file name',
    ),
    "param_shape_text": (_set(["params", "W1"], "64x64"), None, "params.W1: must be a shape"),
    "name_nowhere": (_set(["names", "probs"], 99999), None, "names.probs: 99999 is not a tensor of programs.eval"),
    "lr_text": (_set(["train", "optimizer", "lr"], "fast"), None, "train.optimizer.lr: must be a finite number"),
    "kernel_after": (
        _set(["programs", "eval", "kernels", 1, "after"], [5]),
        None,
        "programs.eval.kernels[1].after[0]: 5 is not an earlier kernel",
    ),
    "tensor_slot": (
        _set(["programs", "eval", "tensors", "0", "slot"], 999),
        None,
        "programs.eval.tensors.0.slot: 999 is not a slot of the program",
    ),
    "uniform_dim": (
        _set(["programs", "eval", "kernels", 0, "uniforms"], {"dim0": "Q"}),
        None,
        'programs.eval.kernels[0].uniforms.dim0: "Q" is not a dim of the model\'s inputs',
    ),
    "pass_tensor": (
        _set(["programs", "eval", "kernels", 0, "passes", 0, "tensor"], 123456),
        None,
        "programs.eval.kernels[0].passes[0].tensor: 123456 is not a tensor of programs.eval",
    ),
    "copies_missing": (lambda m: m["programs"]["train"].pop("copies"), None, "programs.train.copies: must be a list"),
    # the outputs program's names: each read there as tensor names[n], so a root of it
    "outputs_without_program": (
        lambda m: m["programs"].pop("outputs"),
        None,
        "outputs: is there exactly when programs.outputs is",
    ),
    "outputs_unknown": (_set(["outputs"], ["nope"]), None, "outputs[0]: \"nope\" is not a name in 'names'"),
    "outputs_not_a_root": (_set(["outputs"], ["h"]), None, "('h') is not a root of programs.outputs"),
    "outputs_twice": (_set(["outputs"], ["probs", "probs"]), None, "outputs[1]: 'probs' appears twice"),
    "outputs_text": (_set(["outputs"], "probs"), None, 'outputs: must be a list of names, not "probs"'),
    "slot_not_a_leaf": (
        lambda m: next(s for s in m["programs"]["eval"]["slots"] if s["kind"] == "param").update(name="W9"),
        None,
        "is not a param or optimizer state of the model",
    ),
}


def corrupted(root, name: str, edit_manifest, edit_blob) -> None:
    """A copy of the good export with its manifest and/or weights.bin edited."""
    folder = root / name
    shutil.copytree(root / GOOD, folder, dirs_exist_ok=True)
    m = json.loads((folder / "manifest.json").read_text())
    if edit_blob is not None:
        blob = bytearray((folder / "weights.bin").read_bytes())
        edit_blob(blob, m)
        (folder / "weights.bin").write_bytes(bytes(blob))
    if edit_manifest is not None:
        edit_manifest(m)
    (folder / "manifest.json").write_text(json.dumps(m))


def test_load_refuses_a_corrupted_export_naming_the_leaf(web_root, open_export):
    root, _ = web_root
    export_web("samples/mlp_digits.dl", root / GOOD, optimizer="adam")
    for name, (edit_manifest, edit_blob, _) in CORRUPT.items():
        corrupted(root, f"bad_{name}", edit_manifest, edit_blob)
    (root / "bad_not_json").mkdir(exist_ok=True)
    (root / "bad_not_json" / "manifest.json").write_text('{"format": 1,')
    page = open_export(GOOD)  # the export itself loads (the checks pass a good one)
    got = page.call(
        "const { load } = await import('./dlc.js'); const out = {};"
        " for (const name of arg) {"
        "  try { await load(`../bad_${name}/`); out[name] = 'loaded'; }"
        "  catch (e) { out[name] = e.name + ': ' + e.message; } }"
        " return out;",
        [*CORRUPT, "not_json"],
    )
    for name, (_, _, says) in CORRUPT.items():
        assert got[name].startswith("DlcError: ") and says in got[name], (name, got[name])
    assert got["not_json"].startswith("DlcError: ") and "manifest.json is not JSON" in got["not_json"]
    assert not page.errors


MARKUP = '<img src=x onerror="window.pwned = 1">'


def test_markup_in_a_manifest_is_shown_as_text(web_root, browser):
    root, base = web_root
    export_web("samples/quadratic.dl", root / "markup")
    m = json.loads((root / "markup" / "manifest.json").read_text())
    m["model"] = MARKUP + "quadratic.dl"
    shown = f"<b id=bold>{MARKUP}y</b>"  # a tensor renamed (its names entry too)
    m["tensors"][shown] = m["tensors"].pop("y")
    m["names"][shown] = m["names"].pop("y")
    (root / "markup" / "manifest.json").write_text(json.dumps(m))
    # and a refusal whose message carries markup (an extra leaf's name) in the page's error line
    shutil.copytree(root / "markup", root / "markup_error", dirs_exist_ok=True)
    m["web"]["weights"]["leaves"][MARKUP] = dict(m["web"]["weights"]["leaves"]["a"])
    (root / "markup_error" / "manifest.json").write_text(json.dumps(m))
    page = browser.new_page()
    try:
        page.goto(f"{base}markup/index.html")
        page.wait_for_function("window.dlcPage && (window.dlcPage.ready || window.dlcPage.error)", timeout=120_000)
        assert page.evaluate("window.dlcPage.error || null") is None
        assert page.locator("#title").inner_text() == MARKUP + "quadratic.dl"
        assert shown in page.locator("#names").inner_text()
        page.locator("#run").click()
        page.wait_for_function("document.getElementById('output').textContent.includes('cost')")
        assert page.locator("#output").inner_text().count(f"{shown} [1]: ") == 1
        page.goto(f"{base}markup_error/index.html")
        page.wait_for_function("window.dlcPage && window.dlcPage.error", timeout=120_000)
        assert f"leaf '{MARKUP}' is not a param" in page.locator("#error").inner_text()
        # nothing was parsed as HTML: no element made, no handler run
        assert page.evaluate("document.querySelectorAll('img, #bold').length") == 0
        assert page.evaluate("window.pwned === undefined")
    finally:
        page.close()


def _program(b: dict, index: int, text: str) -> None:
    b["programs"][index] = text


# name -> (edit of shaders.json as JSON, or its new bytes; what the DlcError says). The manifest
# then says the file's new size, but for "bytes".
BUNDLE = {
    "bytes": (None, "shaders.json holds"),
    "not_json": (b"{", "shaders.json is not JSON"),
    "not_utf8": (b'{"format": 1, "programs": ["\xff"]}', "shaders.json is not JSON"),
    "format": (lambda b: b.update(format=2), "shaders.json is not a dlc shader bundle of format 1"),
    "programs_text": (lambda b: b.update(programs="x"), "shaders.json: programs: must be a list of shader texts"),
    "program_empty": (lambda b: _program(b, 0, ""), "shaders.json: programs[0]: must be a shader's text"),
    "program_reads_past": (
        lambda b: _program(b, 0, b["programs"][0] + "\nint z = dlc_k[99];"),
        "shaders.json: programs[0]: may declare dlc_k[n] once",
    ),
    "missing_pass": (lambda b: b["passes"].pop(sorted(b["passes"])[0]), "shaders.json: passes: has no shader '"),
    "extra_pass": (
        lambda b: b["passes"].update({"x.frag": [0, []]}),
        "shaders.json: passes.x.frag: is not a shader file of the manifest's programs",
    ),
    "index": (
        lambda b: b["passes"].update({sorted(b["passes"])[0]: [999, []]}),
        "program 999 is not an index of programs",
    ),
    "entry_text": (lambda b: b["passes"].update({sorted(b["passes"])[0]: "0"}), "must be [program, ints]"),
    "ints_count": (lambda b: _shared(b)[1].pop(), "ints, but programs["),
    "int_negative": (
        lambda b: _shared(b)[1].__setitem__(0, -1),
        "int 0 is -1, not a whole number from 0 to 2147483647",
    ),
    "int_float": (lambda b: _shared(b)[1].__setitem__(0, 2.5), "int 0 is 2.5, not a whole number"),
    "int_big": (lambda b: _shared(b)[1].__setitem__(0, 2**31), "int 0 is 2147483648, not a whole number"),
}


def _shared(b: dict) -> list:
    """The first pass entry of a shared program (one with ints)."""
    return next(entry for _, entry in sorted(b["passes"].items()) if entry[1])


def test_load_refuses_a_corrupted_shader_bundle_naming_the_entry(web_root, open_export):
    """dlc.js's checkBundle, and bundle.check in Python on the same files: the same refusals."""
    root, _ = web_root
    export_web("samples/cnn_digits.dl", root / "bundle_good")
    good = json.loads((root / "bundle_good" / bundle.FILE).read_text())
    manifest = json.loads((root / "bundle_good" / "manifest.json").read_text())
    files = {p["file"] for prog in manifest["programs"].values() for k in prog["kernels"] for p in k["passes"]}
    for name, (edit, says) in BUNDLE.items():
        folder = root / f"bundle_{name}"
        shutil.copytree(root / "bundle_good", folder, dirs_exist_ok=True)
        m = json.loads(json.dumps(manifest))
        if edit is None:
            m["web"]["bundle"]["bytes"] += 1
        else:
            raw = edit if isinstance(edit, bytes) else None
            if raw is None:
                b = json.loads(json.dumps(good))
                edit(b)
                raw = json.dumps(b).encode()
            (folder / bundle.FILE).write_bytes(raw)
            m["web"]["bundle"]["bytes"] = len(raw)
            with pytest.raises(DataError) as e:
                bundle.check(raw, files, bundle.FILE)
            assert says in str(e.value), (name, str(e.value))
        (folder / "manifest.json").write_text(json.dumps(m))
    for name, edit in (("elsewhere", "../bundle_good/shaders.json"), ("absent", "none.json"), ("huge", 64 << 20 | 1)):
        m = json.loads(json.dumps(manifest))
        m["web"]["bundle"]["bytes" if name == "huge" else "file"] = edit
        shutil.copytree(root / "bundle_good", root / f"bundle_{name}", dirs_exist_ok=True)
        (root / f"bundle_{name}" / "manifest.json").write_text(json.dumps(m))
    page = open_export("bundle_good")  # the export itself loads
    got = page.call(
        "const { load } = await import('./dlc.js'); const out = {};"
        " for (const name of arg) {"
        "  try { await load(`../bundle_${name}/`); out[name] = 'loaded'; }"
        "  catch (e) { out[name] = e.name + ': ' + e.message; } }"
        " return out;",
        [*BUNDLE, "elsewhere", "absent", "huge"],
    )
    for name, (_, says) in BUNDLE.items():
        assert got[name].startswith("DlcError: ") and says in got[name], (name, got[name])
    assert 'web.bundle.file: "../bundle_good/shaders.json" is not a plain file name' in got["elsewhere"]
    assert got["absent"].startswith("DlcError: cannot load ") and "none.json: HTTP 404" in got["absent"]
    assert "web.bundle.bytes: must be a whole number up to 67108864 (a shader bundle's most)" in got["huge"]
    assert not page.errors
