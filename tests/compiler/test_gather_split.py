"""When gather's gradient splits its positions across work groups (codegen/kernels_scatter.py
`split_chunk`): decided at compile time from the sizes at the plan's reference binding, so
the kernel's header line says it. No GL needed."""

from __future__ import annotations

import pytest

import dlc
from dlc.compiler.autodiff import differentiate
from dlc.compiler.pipeline import compile_program
from dlc.compiler.simplify import simplify


def _header(table, positions, ref_dims=None, options=None) -> str:
    def dims(shape) -> str:
        return "[" + ", ".join(map(str, shape)) + "]"

    src = f"input t: i32{dims(positions)}\ninput g: {dims((*positions, table[1]))}\nparam wte: {dims(table)}\n"
    src += "loss cost = sum(gather(wte, t) * g)\n"
    graph, grads = differentiate(dlc.compile(src).graph, "cost", ["wte"])
    graph = simplify(graph)
    prog = compile_program(graph, [graph.names["grad$wte"]], ref_dims=ref_dims, options=options)
    (line,) = [k.source.split("\n")[1] for k in prog.kernels if "gather_grad into" in k.source.split("\n")[1]]
    return line


def test_the_gpts_embedding_gradient_splits_its_positions():
    # [65, 384]: 390 groups over 16,384 positions; aiming at 4096 groups, chunks of 1560
    # rounded up to whole tiles of 256 (10 chunks)
    assert "a chunk of 1792 positions" in _header((65, 384), (64, 256))


def test_symbolic_positions_split_by_their_reference_dims():
    assert "a chunk of 1792 positions" in _header((65, 384), ("B", "T"), {"B": 64, "T": 256})
    assert "chunk" not in _header((65, 384), ("B", "T"), {"B": 1, "T": 256})  # 256 positions: one tile


@pytest.mark.parametrize(
    "table, positions",
    [((50304, 768), (8, 1024)), ((65, 384), (2, 256)), ((4096, 384), (64, 256))],
    ids=["gpt2-vocab", "few-positions", "groups-enough"],
)
def test_no_split_where_the_groups_fill_the_device_or_the_positions_are_few(table, positions):
    assert "chunk" not in _header(table, positions)


def test_a_forced_chunk_and_no_split():
    assert "a chunk of 300 positions" in _header((65, 384), (4, 256), options={"gather_chunk": 300})
    assert "chunk" not in _header((65, 384), (64, 256), options={"gather_chunk": 0})
    assert "chunk" not in _header((65, 384), (2, 100), options={"gather_chunk": 300})  # one chunk holds them
    with pytest.raises(ValueError, match="gather_chunk"):
        _header((65, 384), (64, 256), options={"gather_chunk": -1})


def test_no_split_where_the_scratch_would_pass_the_storage_blocks():
    # a device of 3 storage blocks, all taken by the kernel's t, g and gradient: no scratch
    limits = {"max_compute_ssbo_blocks": 3, "max_ssbo_bindings": 3}
    assert "chunk" not in _header((65, 384), (64, 256), options={"limits": limits})
