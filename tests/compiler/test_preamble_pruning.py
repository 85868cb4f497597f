"""Each GLSL kernel carries only the PREAMBLE helpers it uses (compiler/codegen/glsl.py)."""

from __future__ import annotations

import re

import dlc
from dlc.compiler.codegen.glsl import PREAMBLE, preamble_parts, pruned_preamble
from dlc.compiler.emit import programs

TOY = """\
#define TOY_ONE 1.0
#define TOY_TWO (TOY_ONE + TOY_ONE)

// doubles
float toy_double(float x) {
    return x * TOY_TWO;
}

// calls toy_double
float toy_quad(float x)
{
    if (x > 0.0) { return toy_double(toy_double(x)); }
    return 0.0;
}
"""


def test_a_preamble_splits_into_named_parts_with_their_comments():
    parts = preamble_parts(TOY)
    assert [n for n, _ in parts] == ["TOY_ONE", "TOY_TWO", "toy_double", "toy_quad"]
    assert dict(parts)["toy_double"].startswith("\n// doubles\nfloat toy_double")
    assert dict(parts)["toy_quad"].rstrip().endswith("return 0.0;\n}")
    assert "".join(t for _, t in parts).replace("\n", "") == TOY.replace("\n", "")


def test_pruning_keeps_what_is_used_directly_or_through_a_helper():
    kept = pruned_preamble("y = toy_quad(x);", TOY)
    assert all(n in kept for n in ("TOY_ONE", "TOY_TWO", "toy_double", "toy_quad"))
    kept = pruned_preamble("y = toy_double(x);", TOY)
    assert "toy_double" in kept and "TOY_TWO" in kept and "toy_quad" not in kept
    assert pruned_preamble("y = x + TOY_ONE;", TOY).strip() == "#define TOY_ONE 1.0"
    assert (
        pruned_preamble("y = x; // toy_quadruple is not toy_quad", TOY)
        == pruned_preamble("y = x; // toy_quad", TOY)
        != ""
    )
    assert pruned_preamble("y = x;", TOY) == ""


def test_the_real_preamble_has_every_helper_named():
    names = {n for n, _ in preamble_parts(PREAMBLE)}
    for helper in re.findall(r"\b(dlc_\w+)\s*\(", PREAMBLE):
        assert helper in names


def sources(text: str) -> dict[str, str]:
    model = dlc.compile(text)
    progs = programs(model, train_loss=next(iter(model.losses), None), optimizer=dlc.SGD(0.1) if model.losses else None)
    return {f"{p}/{f}": t for p, prog in progs.items() for f, t in prog.sources.items()}


def test_kernels_carry_only_the_helpers_they_use():
    plain = sources("input x: [B, 4]\nparam w: [4, 3]\ny = relu(x @ w)\nloss c = mean(y)\n")
    for name, text in plain.items():
        for helper in ("dlc_pow", "dlc_tanh", "dlc_sigmoid"):
            assert helper not in text, (name, helper)
    mixed = sources("input x: [B]\ny = tanh(x) * 2\nz = x ^ 3\n")
    texts = list(mixed.values())
    with_tanh = [t for t in texts if "dlc_tanh(" in t.split("void main")[-1]]
    assert with_tanh and all("float dlc_pow" not in t for t in with_tanh if "dlc_pow(" not in t.split("void main")[-1])
    for t in texts:
        body = t.split("void main")[-1]
        for helper in ("dlc_pow", "dlc_tanh", "dlc_sigmoid"):
            assert (f"float {helper}(" in t) == (f"{helper}(" in body)
