"""The shader bundle of a web export (dlc/web/bundle.py), no browser: every pass gets back the
code of its own shader (up to the names of its locals), shaders that differ only in integer
constants share one program, and a corrupted bundle is refused naming the entry."""

from __future__ import annotations

import json
import re

import pytest

from dlc.runtime.errors import DataError
from dlc.web import bundle, export_web

# Three layers of different widths: the products passes of h1 and h2 differ in their shapes alone.
MLP = """input x: [B, 48]
param W1: [48, 40] = he
param W2: [40, 24] = he
param W3: [24, 12] = he
h1 = relu(x @ W1)
h2 = relu(h1 @ W2)
y = h2 @ W3
"""

WORD = re.compile(r"[A-Za-z_]\w*|\d+\.\d*|\d+|\S")


def _same_code_but_names(a: str, b: str) -> bool:
    """Whether the two codes (comments aside) are one token sequence once some names of `b`
    are renamed one to one to those of `a`, never a name declared uniform or out (what the
    runtime binds)."""
    ta, tb = (WORD.findall(re.sub(r"//[^\n]*", "", c)) for c in (a, b))
    if len(ta) != len(tb):
        return False
    bound = set(re.findall(r"\b(?:uniform|out)\s+\w+(?:\s+\w+)?\s+(\w+)", b))
    forth: dict[str, str] = {}
    back: dict[str, str] = {}
    for x, y in zip(ta, tb):
        if x == y and y not in forth:
            continue
        if not all(t[0].isalpha() or t[0] == "_" for t in (x, y)) or y in bound:
            return False
        if forth.setdefault(y, x) != x or back.setdefault(x, y) != y:
            return False
    return True


def _export(tmp_path, source: str = MLP, name: str = "m"):
    (tmp_path / f"{name}.dl").write_text(source, encoding="utf-8")
    out = export_web(tmp_path / f"{name}.dl", tmp_path / name)
    manifest = json.loads((out / "manifest.json").read_text())
    files = {p["file"] for prog in manifest["programs"].values() for k in prog["kernels"] for p in k["passes"]}
    return out, manifest, files


def test_every_pass_runs_its_own_shaders_code(tmp_path):
    for source, name in ((MLP, "mlp"), (open("samples/cnn_digits.dl").read(), "cnn")):
        out, manifest, files = _export(tmp_path, source, name)
        raw = (out / bundle.FILE).read_bytes()
        assert manifest["web"]["bundle"] == {"file": bundle.FILE, "bytes": len(raw)}
        b = bundle.check(raw, files, bundle.FILE)
        assert set(b["passes"]) == files
        for f in files:
            own = (out / "shaders" / f).read_text()
            got = bundle.expand(b, f)
            assert "dlc_k" not in got and _same_code_but_names(got, own), f
        assert len(b["programs"]) < len({bundle.code_of((out / "shaders" / f).read_text()) for f in files})


def test_the_layers_products_share_one_program_with_their_own_ints(tmp_path):
    out, manifest, files = _export(tmp_path)
    b = json.loads((out / bundle.FILE).read_text())
    products = sorted(f for f in files if f.startswith("eval_") and f.endswith("_pack5.frag"))
    assert len(products) == 3  # the three layers' products passes
    own = [bundle.code_of((out / "shaders" / f).read_text()) for f in products]
    assert len(set(own)) == 3  # three codes...
    (i, a), (j, c) = (b["passes"][f] for f in products[:2])
    assert i == j and a != c  # ...of which the two shaped alike are one program, told apart by their ints
    text = b["programs"][i]
    assert f"uniform int dlc_k[{len(a)}];" in text and "q < dlc_k[" in text  # the loop over k
    assert "layout(location = 0)" in text and "#version 300 es" in text  # never lifted


def test_literals_in_layouts_brackets_and_consts_stay_in_the_text():
    head = "#version 300 es\nprecision highp float;\nlayout(location = {}) out vec4 o1;\n"
    body = "void main() {{ const int n = {}; vec4 v = vec4(1.0); o1 = vec4(v[{}], float(n + {}), 0.0, 0.0); }}\n"
    a = head.format(0) + body.format(3, 1, 7)
    b = bundle.make({"a.frag": a, "b.frag": head.format(0) + body.format(3, 1, 9)})
    assert len(b["programs"]) == 1 and b["passes"]["a.frag"][1] == [7] and b["passes"]["b.frag"][1] == [9]
    assert "const int n = 3;" in b["programs"][0] and "v[1]" in b["programs"][0]
    # the same but for the layout's location, the const's value, the bracket's index
    for layout, const, index in ((1, 3, 1), (0, 4, 1), (0, 3, 2)):
        other = head.format(layout) + body.format(const, index, 7)
        assert len(bundle.make({"a.frag": a, "b.frag": other})["programs"]) == 2  # not one program


def test_a_group_needing_too_many_ints_keeps_its_shaders_apart(monkeypatch):
    head = "#version 300 es\nprecision highp float;\nout vec4 o;\n"
    a = head + "void main() { int x = 1 + 2; o = vec4(float(x)); }\n"
    b = head + "void main() { int x = 3 + 4; o = vec4(float(x)); }\n"
    assert len(bundle.make({"a": a, "b": b})["programs"]) == 1
    monkeypatch.setattr(bundle, "MAX_LIFTED", 1)
    assert bundle.make({"a": a, "b": b})["programs"] == [bundle.code_of(a), bundle.code_of(b)]


def _bad(b: dict, edit) -> bytes:
    """The bundle `b` as bytes after `edit` of a copy."""
    b = json.loads(json.dumps(b))
    edit(b)
    return json.dumps(b).encode()


def test_a_corrupted_bundle_is_refused_naming_the_entry(tmp_path, monkeypatch):
    out, _, files = _export(tmp_path)
    good = json.loads((out / bundle.FILE).read_text())
    shared = next(f for f, (_, ints) in good["passes"].items() if ints)
    first = sorted(files)[0]
    cases = {
        b"{": "is not JSON",
        _bad(good, lambda b: b.update(format=2)): "is not a dlc shader bundle of format 1",
        _bad(good, lambda b: b.update(programs="x")): "programs: must be a list of shader texts",
        _bad(good, lambda b: b["passes"].pop(first)): f"passes: has no shader '{first}'",
        _bad(good, lambda b: b["passes"].update({"other.frag": [0, []]})): "passes.other.frag: is not a shader file",
        _bad(good, lambda b: b["passes"].update({first: [len(b["programs"]), []]})): "is not an index of programs",
        _bad(good, lambda b: b["passes"].update({first: [True, []]})): "is not an index of programs",
        _bad(good, lambda b: b["passes"].update({first: "0"})): "must be [program, ints]",
        _bad(good, lambda b: b["passes"][shared][1].pop()): "ints, but programs[",
        _bad(good, lambda b: b["passes"][shared][1].__setitem__(0, -1)): "int 0 is -1, not a whole number",
        _bad(good, lambda b: b["passes"][shared][1].__setitem__(0, 2.5)): "int 0 is 2.5",
        _bad(good, lambda b: b["passes"][shared][1].__setitem__(0, 2**31)): "int 0 is 2147483648",
        _bad(good, lambda b: b["programs"].__setitem__(0, b["programs"][0] + "\nint z = dlc_k[99];")): "read its",
        _bad(good, lambda b: b["programs"].__setitem__(0, "uniform int dlc_k[0];\n" + b["programs"][0])): "0 < n",
    }
    for raw, says in cases.items():
        with pytest.raises(DataError) as e:
            bundle.check(raw, files, "shaders.json")
        assert str(e.value).startswith("shaders.json") and says in str(e.value), (says, str(e.value))
    monkeypatch.setattr(bundle, "MAX_BYTES", 100)
    with pytest.raises(DataError, match="more than the 100 a shader bundle may"):
        bundle.check(json.dumps(good).encode(), files, "shaders.json")
