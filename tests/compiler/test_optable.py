"""README's table of functions is the registry's (compiler/optable.py), and every function of
the language is an entry with a signature, a doc and a group."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlc.compiler import optable, registry
from dlc.compiler.registry import FUNCTIONS, NOT_DIFFERENTIABLE

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_table_matches_the_registry():
    text = README.read_text()
    assert optable.rewrite(text) == text, "README's op table is stale: run python -m dlc.compiler.optable README.md"


def test_function_table_is_the_registrys():
    assert set(FUNCTIONS) == {e.name for e in registry.language_entries()}
    for e in registry.language_entries():
        assert e.doc and e.group in optable.GROUPS, f"{e.name}: doc {e.doc!r}, group {e.group!r}"
        assert FUNCTIONS[e.name].differentiable == e.differentiable
    assert NOT_DIFFERENTIABLE == set(registry.not_differentiable())
    assert {"sign", "step", "eq", "argmax", "one_hot", "floor", "ceil", "round"} <= NOT_DIFFERENTIABLE
    assert {"logical_and", "logical_or", "logical_not"} <= NOT_DIFFERENTIABLE
    assert not {"relu", "mean", "softmax", "mod", "gelu", "atan"} & NOT_DIFFERENTIABLE


def test_every_op_lowers_for_both_glsl_targets():
    from dlc.compiler import codegen  # noqa: F401  (its modules register the lowerings as they load)

    for name, op in registry.REGISTRY.items():
        for target in ("glsl-compute", "glsl-texture"):
            assert op.lower(target), f"{name} has no lowering for {target}"
        if op.kind == "elementwise":
            assert op.glsl == op.lower("glsl-compute")


def test_table_without_markers_is_an_error():
    with pytest.raises(ValueError, match="no op table markers"):
        optable.rewrite("# a README without the table\n")


def test_registering_twice_is_an_error():
    with pytest.raises(ValueError, match="'relu' registered twice"):
        registry.register(registry.get("relu"))
