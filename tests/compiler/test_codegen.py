"""GLSL text: what each template emits (no GL needed; tests/gl runs the shaders)."""

from __future__ import annotations

import math
import re

import pytest

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.codegen import render
from dlc.compiler.codegen.glsl import comment, float_lit
from dlc.compiler.codegen.kernels_matmul import choose
from dlc.compiler.fusion import fuse
from dlc.compiler.lang import compile_source
from dlc.compiler.pipeline import compile_program
from dlc.compiler.plan import plan


def kernels(source: str, *names: str, dims=None, options=None):
    g = compile_source(source, "t.dl")
    return render(plan(fuse(g, [g.names[n] for n in names]), dims or {"B": 8}), options)


def test_elementwise_over_a_multiple_of_four_is_vec4():
    (k,) = kernels("input x: [B, 12]\ninput b: [12]\ny = relu(x * 2 + 1)\n", "y")
    assert "vec4 v[]" in k.source and "b1.v[i4] = vec4(" in k.source
    assert k.grid == {"flat": [3, "B"], "per_group": 256}


@pytest.mark.parametrize(
    "src",
    [
        "input x: [B, 7]\ny = relu(x) * 2\n",  # 7*B need not be a multiple of 4
        "input x: [B, 6]\ninput b: [6]\ny = x + b\n",  # a broadcast read is not per element
        "input x: [6, 8]\ny = transpose(x) + 1\n",  # nor is a transposed one (rows of 6)
    ],
)
def test_other_elementwise_kernels_are_scalar_and_bounds_checked(src):
    (k,) = kernels(src, "y")
    assert "vec4" not in k.source.split("void main")[1]
    assert re.search(r"if \(i >= .*\) return;", k.source)


@pytest.mark.parametrize(
    "src",
    [
        "input x: [B, 12]\ninput b: [12]\ny = x + b\n",
        "input x: [B, 3, 8]\ny = transpose(x, [1, 0, 2]) * 2\n",  # heads moved, rows of 8 kept
    ],
)
def test_kernels_with_rows_of_a_multiple_of_4_take_four_neighbours_an_invocation(src):
    (k,) = kernels(src, "y")
    main = k.source.split("void main")[1]
    assert "4 neighbours along the last axis" in k.source.split("\n")[1]
    assert "b1.v[i4] = vec4(" in main or "b2.v[i4] = vec4(" in main
    # the coordinates found once, for the first of the four: one division by the symbolic B*
    assert main.count(" / ") <= 4 and re.search(r"if \(i4 >= .*\) return;", main)


def test_every_kernel_names_what_it_fuses_and_lists_its_ir_with_lines():
    (k,) = kernels("input x: [B, 5]\nparam W: [5, 3]\nparam b: [3]\n\nh = relu(x @ W + b)\n", "h")
    assert k.name == "k00_matmul_add_relu"
    head = k.source.split("layout(local_size")[0]
    assert "// kernel k00_matmul_add_relu: matmul" in head
    for text in ("matmul(x, W, ta=False, tb=False)", "add(%", "h = relu(", "(t.dl:5)"):
        assert text in head


def test_symbolic_dims_are_int_uniforms():
    (k,) = kernels("input x: [B, 3]\ny = sum(x * x, axis=1)\n", "y")
    assert "uniform int dim0;  // B" in k.source
    assert k.uniforms == {"dim0": "B"}


def test_user_names_never_reach_glsl_outside_comments():
    b = GraphBuilder()
    evil = "x\u00e9*/\nvoid main() { }\\"
    x = b.input(evil, (5,))
    y = b.add("exp", [x])
    b.declare("y\nbad", y, None)
    prog = compile_program(b.build(), [y])
    (source,) = prog.sources.values()
    assert source.isascii()
    code = "\n".join(line.split("//")[0] for line in source.splitlines())
    assert "bad" not in code and "\u00e9" not in source and code.count("void main") == 1
    assert all("\\" not in line for line in source.splitlines())


def test_float_literals():
    assert float_lit(2) == "2.0"
    assert float_lit(-0.5) == "(-0.5)"
    assert float_lit(1e-8) == "1e-08"
    assert float_lit(math.inf) == "DLC_INF" and float_lit(-math.inf) == "(-DLC_INF)"
    assert float_lit(math.nan) == "DLC_NAN"
    assert float_lit(-3.4028234663852886e38) == "(-3.4028234663852886e+38)"  # float32's min is finite (a mask value)
    assert comment("a\nb\u00e9") == "a?b?"


def test_preamble_defines_the_helpers_the_registry_uses():
    (k,) = kernels("input x: [3]\ny = sigmoid(x) ^ 3\n", "y")
    assert "float dlc_pow(float x, float y)" in k.source
    assert "float dlc_sigmoid(float x)" in k.source
    assert "dlc_pow(dlc_sigmoid(" not in k.source  # operands are temporaries, not nested calls


def test_reductions_pick_a_shape_of_kernel():
    # a longer row than 16 x 256: one work group per output, combined in shared memory
    (k,) = kernels("input x: [B, 5000]\ny = sum(x, axis=1)\n", "y")
    assert "shared float part[256];" in k.source and k.grid["per_group"] == 1
    # many rows of 16 to 4096 (B is not known to be few): a run of lanes a row, rows a group
    (k,) = kernels("input x: [B, 1000]\ny = sum(x, axis=1)\n", "y")
    assert "shared float rd_part[128];" in k.source and k.grid["per_group"] == 2
    assert "2 rows a work group of 128, 16 elements a lane" in k.source.split("\n")[1]
    # few rows known (a loss's): still a work group each
    (k,) = kernels("input x: [8, 1000]\ny = sum(x, axis=1)\n", "y")
    assert "shared float part[256];" in k.source and k.grid["per_group"] == 1
    # a short row or a reduction over the batch: one invocation per output
    (k,) = kernels("input x: [B, 10]\ny = max(x, axis=1)\n", "y")
    assert "shared" not in k.source and k.grid["per_group"] == 256
    (k,) = kernels("input x: [B, 10]\ny = sum(x, axis=0)\n", "y")  # few outputs: a group each
    assert k.grid["per_group"] == 1
    # a long reduction over the batch with many outputs: 16 columns a work group
    (k,) = kernels("input x: [B, 1000]\ny = sum(x, axis=0)\n", "y")
    assert "shared float part[16][17]" in k.source and k.grid["flat"] == [1000] and k.grid["per_group"] == 16
    # ... cut into chunks of 512 rows (B is not known to fit one), with a scratch buffer: a
    # partial and its scaled twin per chunk (the sum's path when a partial overflows)
    assert k.grid["split"] == [[1, "B"], 512] and k.grid["scratch"] == 2
    # a reduction known to fit one chunk is not split
    (k,) = kernels("input x: [500, 1000]\ny = sum(x, axis=0)\n", "y")
    assert "split" not in k.grid and "sc.w" not in k.source
    # a long reduction over a middle axis: a work group an output, however many outputs
    (k,) = kernels("input x: [B, 5000, 10]\ny = sum(x, axis=1)\n", "y")
    assert k.grid["per_group"] == 1 and "shared float part[256];" in k.source
    # argmax keeps the first maximum's index
    (k,) = kernels("input x: [B, 10]\ny = argmax(x)\n", "y")
    assert "best = r;" in k.source and "epilogue(o, float(best));" in k.source


@pytest.mark.parametrize(
    "shape, want",
    [
        ((4096, 4096, 4096), "big"),
        ((1024, 1024, 784), "medium"),
        ((64, 10, 64), "tile16"),
        ((7, 300, 5), "direct"),  # K under one 16-deep slab
        ((7, 300, 64), "rows"),  # a few rows over a K known at compile time
        ((20, 40, 40), "tile16"),
    ],
)
def test_matmul_variant_by_size(shape, want):
    m, n, k = shape
    src = f"input x: [{m}, {k}]\nparam W: [{k}, {n}]\ny = x @ W\n"
    g = compile_source(src, "t.dl")
    p = plan(fuse(g, [g.names["y"]]))
    from dlc.compiler.codegen.glsl import Context

    ctx = Context(p.fusion, p, p.fusion.kernels[0], {})
    assert choose(ctx) == want


def test_blocked_matmul_uses_vec4_loads_only_where_aligned():
    src = "input x: [B, 64]\nparam W: [64, 66]\ny = x @ W\n"
    (k,) = kernels(src, "y", options={"matmul": "medium"})
    assert "b0_a4.v[" in k.source or "_a4.v[" in k.source  # x rows are 64 floats: aligned
    assert "_b4.v[" not in k.source.split("void main")[1]  # W rows are 66 floats: not
    assert k.grid == {"tiles": [[[66], 64], [[1, "B"], 64], [[1], 1]]}


def test_pads_and_concats_read_each_input_only_in_its_range():
    # a split's gradient is a sum of pads: each element reads the one input that covers it
    # (rows of 7: one element an invocation)
    src = "input a: [B, 3]\ninput b: [B, 4]\ny = pad(a, [0, 0], [0, 4]) + pad(b, [0, 3], [0, 0])\n"
    (k,) = kernels(src, "y")
    body = k.source.split("void main() {")[1]
    lines = body.split("\n")
    for buf in ("b0.v[", "b1.v["):
        assert body.count(buf) == 1
        (at,) = [i for i, line in enumerate(lines) if buf in line]
        assert lines[at - 1].strip().startswith("if ("), body
    (k,) = kernels("input a: [B, 3]\ninput b: [B, 4]\ny = concat([a, b * 2], axis=1)\n", "y")
    body = k.source.split("void main() {")[1]
    assert body.count("b0.v[") == 1 and body.count("b1.v[") == 1
    assert re.search(r"if \(\w+ < 3\) \{\n\s+float n\d+ = b0\.v\[", body), body
