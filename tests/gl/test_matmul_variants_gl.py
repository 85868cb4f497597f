"""Every switch of the blocked matmul template (matmul_tuning.Variant), forced, against the
NumPy reference at small odd sizes: transposes, batches, fused epilogues, in-place updates,
split-K across work groups, and the fallbacks where a switch's precondition fails."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gl_helpers import matmul_graph

from dlc.backends.reference import NumpyBackend
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.pipeline import compile_program
from dlc.compiler.reference import evaluate

pytestmark = pytest.mark.gl

# (blocking, switches): each switch alone, then together, on register tiles 8x8, 8x4, 4x8, 4x4
VARIANTS = [
    ((64, 64, 16, 4, 4), {"double_buffer": True}),
    ((128, 128, 16, 8, 8), {"double_buffer": True}),
    ((128, 128, 16, 8, 8), {"warp": (4, 8)}),
    ((128, 64, 16, 8, 4), {"warp": (8, 4)}),
    ((64, 128, 16, 4, 8), {"warp": (4, 8), "double_buffer": True}),
    ((64, 64, 16, 4, 4), {"store4": True}),
    ((64, 64, 16, 4, 4), {"load4": False}),
    ((64, 64, 16, 4, 4), {"prefetch": False}),
    ((128, 64, 32, 8, 4, 2), {"double_buffer": True, "warp": (4, 8), "store4": True}),
    ((64, 64, 32, 8, 8, 4), {"double_buffer": True, "store4": True}),
    ((16, 16, 64, 4, 4, 16), {"double_buffer": True, "warp": (4, 8), "store4": True}),  # warp falls back
    ((128, 128, 16, 8, 8), {"warp": (4, 8), "unroll": True}),  # the H100/H200 "splitk" row
    ((64, 128, 32, 4, 8, 2), {"double_buffer": True, "warp": (4, 8), "unroll": True}),
    # A kept along K: with the written-out loop, double-buffered in K-groups, a partial last
    # round of fetches (64 x 32 slab rows: 512 vec4s for 384 invocations)
    ((128, 128, 16, 8, 8), {"warp": (4, 8), "unroll": True, "along_k": True}),
    ((128, 64, 32, 8, 4, 2), {"double_buffer": True, "warp": (4, 8), "along_k": True}),
    ((64, 96, 32, 4, 4), {"store4": True, "along_k": True}),
]
IDS = [f"{b}-{'+'.join(f'{k}={v}' for k, v in s.items())}" for b, s in VARIANTS]


def _options(blocking, switches) -> dict:
    return {"matmul_variant": {"blocking": blocking, **switches}}


def _check(options, a_shape, b_shape, ta, tb, dims=None, epilogue=True, seed=0, atol=1e-4):
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(seed)
    g, y = matmul_graph(a_shape, b_shape, ta, tb, epilogue)
    bound = [tuple((dims or {}).get(d, d) for d in s) for s in (a_shape, b_shape)]
    feeds = {"a": rng.normal(size=bound[0]), "w": rng.normal(size=bound[1])}
    if epilogue:
        feeds["bias"] = rng.normal(size=g.nodes[y].shape[-1])
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    backend = GLBackend(options)
    try:
        (got,) = backend.run(g, [y], feeds, dims or {})
    finally:
        backend.close()
    want = evaluate(g, [y], feeds, dims or {})[y]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)
    return compile_program(g, [y], options=options, ref_dims=dims).kernels[0].source


@pytest.mark.parametrize("blocking,switches", VARIANTS, ids=IDS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_each_variant_at_odd_sizes(gl, blocking, switches, ta, tb):
    m, k, n = 131, 75, 68  # N a multiple of 4 (vec4 stores apply), K and M not (vec4 loads fall back)
    _check(_options(blocking, switches), (k, m) if ta else (m, k), (n, k) if tb else (k, n), ta, tb)


@pytest.mark.parametrize("blocking,switches", VARIANTS, ids=IDS)
def test_each_variant_with_aligned_operands(gl, blocking, switches):
    # K, M and N multiples of 4: the vec4 loads run (a row ends inside a slab: K = 52)
    source = _check(_options(blocking, switches), (36, 52), (52, 132), False, False, seed=1)
    assert "_a4.v[" in source and "_b4.v[" in source if switches.get("load4", True) else "_a4.v[" not in source


@pytest.mark.parametrize("blocking,switches", VARIANTS[:6] + VARIANTS[8:9], ids=IDS[:6] + IDS[8:9])
def test_each_variant_batched(gl, blocking, switches):
    options = _options(blocking, switches)
    # both operands batched, A transposed
    _check(options, (3, 40, 70), (3, 40, 68), True, False)
    # a symbolic batch against a shared rank-2 operand, at two bindings of one program
    _check(options, ("B", 33, 20), (20, 72), False, False, dims={"B": 2})
    _check(options, ("B", 33, 20), (20, 72), False, False, dims={"B": 1})
    # several batch dims broadcast both ways (a symbolic one among them), B transposed
    _check(options, ("B", 1, 3, 33, 20), (1, 2, 3, 72, 20), False, True, dims={"B": 2})


def test_store4_falls_back_where_n_is_not_a_multiple_of_4(gl):
    source = _check(_options((64, 64, 16, 4, 4), {"store4": True}), (70, 30), (30, 67), False, False)
    assert "scalar stores: N = 67 is not a multiple of 4" in source.split("\n")[1]
    assert "epilogue4" not in source


def test_along_k_falls_back_where_a_k_group_has_under_4_slab_rows(gl):
    # slabs of 16 among 8 K-groups: 2 rows each, so A is transposed into [k][m / 4] as before
    options = _options((32, 32, 16, 4, 4, 8), {"along_k": True})
    source = _check(options, (70, 30), (30, 68), False, False)
    head = source.split("\n")[1]
    assert "a K-group's 2 slab rows are not a multiple of 4" in head and "A kept along K" not in head
    # A stored transposed runs along M already
    source = _check(_options((64, 64, 16, 4, 4), {"along_k": True}), (30, 70), (30, 68), True, False)
    assert "A transposed into [k][m / 4]: it is stored along M" in source.split("\n")[1]
    # and one it applies to says so
    source = _check(_options((64, 64, 16, 4, 4), {"along_k": True}), (70, 30), (30, 68), False, False)
    assert "A kept along K" in source.split("\n")[1] and "A slab [m][k / 4]" in source


def test_double_buffer_falls_back_past_the_shared_memory_limit(gl):
    # 128x128 tiles with K-slabs of 32: two slabs take 64 KiB, past the default 32 KiB
    options = _options((128, 128, 32, 8, 8), {"double_buffer": True})
    source = _check(options, (130, 40), (129, 40), False, True)
    head = source.split("\n")[1]
    assert "single-buffered: two slabs need 65536 bytes" in head and "double-buffered" not in head.split(";")[1]


@pytest.mark.parametrize("switches", [{"double_buffer": True, "warp": (4, 8)}, {"store4": True}, {"unroll": True}])
def test_split_k_across_work_groups(gl, switches):
    from dlc.compiler.codegen import kernels_matmul

    # K past LONG_K: the product is split across work groups, partials added in order
    m, k, n = 40, kernels_matmul.LONG_K + 700, 36
    options = _options((64, 64, 32, 4, 4), switches)
    # float32 sums of 17000 terms of size ~1 (results ~130): rounding differs by ~1e-3
    source = _check(options, (m, k), (k, n), False, False, epilogue=True, seed=3, atol=5e-3)
    assert "K-chunks of" in source.split("\n")[1]
    if "store4" in switches:
        assert "scalar stores: split-K partials" in source.split("\n")[1]


def test_in_place_update_keeps_scalar_stores(gl):
    """A param updated in place by the matmul's epilogue (w -= 0.1 * a^T @ d): vec4 stores
    would alias the float reads of w, so they fall back; the update matches the reference."""
    from dlc.backends.gl import GLBackend
    from dlc.compiler.ir import Graph

    b = GraphBuilder()
    a, d = b.input("a", (37, 24)), b.input("d", (37, 20))
    w = b.param("w", (24, 20), ("normal", 0.0, 0.5))
    grad = b.add("matmul", [a, d], ta=True, tb=False)
    new_w = b.add("sub", [w, b.add("mul", [b.const(0.1), grad])])
    g0 = b.build()
    g = Graph(g0.nodes, g0.names, g0.inputs, g0.params, g0.states, g0.losses, (("w", new_w),))
    rng = np.random.default_rng(4)
    feeds = {"a": rng.normal(size=(37, 24)).astype(np.float32), "d": rng.normal(size=(37, 20)).astype(np.float32)}
    w0 = rng.normal(size=(24, 20)).astype(np.float32)
    options = _options((64, 64, 16, 4, 4), {"store4": True, "double_buffer": True})
    gl_backend, ref = GLBackend(options), NumpyBackend()
    for be in (gl_backend, ref):
        be.set_leaf("w", w0)
    for _ in range(2):
        got = gl_backend.step(g, [grad], feeds, {})
        want = ref.step(g, [grad], feeds, {})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gl_backend.get_leaf("w"), ref.get_leaf("w"), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ref.get_leaf("w"), w0 - 0.2 * (feeds["a"].T @ feeds["d"]), rtol=1e-4, atol=1e-4)
    compiled, _ = gl_backend.program(g, [grad], True, {})
    gl_backend.close()
    heads = [k.source.split("\n")[1] for k in compiled.kernels if k.name.startswith("k00_matmul")]
    assert heads and "scalar stores: an output is updated in place" in heads[0]


def test_the_llvmpipe_row_is_what_the_gl_backend_renders_with(gl):
    """The GL backend passes its context's renderer to codegen: the header names the family."""
    from dlc.backends.gl import GLBackend
    from dlc.compiler.codegen import matmul_tuning

    g, y = matmul_graph((140, 70), (70, 136), False, False)
    backend = GLBackend()
    compiled, _ = backend.program(g, [y], False, {})
    backend.close()
    head = compiled.kernels[0].source.split("\n")[1]
    assert f"({matmul_tuning.family(gl.renderer)}, split" in head
    # 140 rows: 128-row tiles would leave the second one 12 rows of 128; 64-row tiles fit
    assert "64x64 tiles" in head and "tile fitted to 140x136" in head


def test_the_tuner_prints_a_table_row_the_table_reads(gl, capsys, tmp_path):
    """benchmarks/tune_matmul.py at tiny sizes: each candidate checked against float64, and the
    row it prints parses as the tuning table's entries."""
    import ast
    import pathlib
    import sys

    from dlc.compiler.codegen import matmul_tuning

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    import tune_matmul

    argv = ["--small", "--classes", "thin,tile16", "--budget", "3", "--reps", "1", "--warm", "0"]
    assert tune_matmul.main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    literal = out.split("TABLE:\n", 1)[1].split("\n", 2)[2]  # after the comment line
    ((family, row),) = ast.literal_eval(literal).items()
    assert family == matmul_tuning.family(gl.renderer)
    assert set(row) == {"wave", "shared_bytes", "short_chunk", *matmul_tuning.CLASSES}
    for cls in matmul_tuning.CLASSES:
        if row[cls] is not None or cls not in matmul_tuning.OPTIONAL:
            matmul_tuning.variant(row[cls])
    assert "| thin | thin (small) 300x260x10" in out and "WRONG" not in out
    assert (tmp_path / "tune_matmul.json").exists()


def test_the_probe_times_forced_variants_and_names_the_ones_that_cannot_run(gl, capsys):
    """benchmarks/probe_matmul.py at tiny sizes: every variant checked against float64 (its
    error printed), and a blocking past this device's shared memory reported, not raised."""
    import pathlib
    import re
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    import probe_matmul

    variants = [["table", None], ["too big", {"blocking": [256, 256, 64, 8, 8]}]]
    args = ["--shapes", "[[72, 40, 68, 1, 0]]", "--variants", json.dumps(variants), "--reps", "1"]
    assert probe_matmul.main(args) == 0
    out = capsys.readouterr().out
    errors = [float(e) for e in re.findall(r"err (\S+)", out)]
    assert "72x40x68 ta=1 tb=0" in out and len(errors) == 1 and errors[0] < 1e-5
    assert "too big" in out and "failed: matmul blocking (256, 256, 64" in out


@pytest.mark.parametrize("switches", [{}, {"store4": True, "double_buffer": True}])
def test_batch_rows_folded_into_one_product(gl, switches):
    # x @ W over [B, T, C] (W shared): one [B*T, C] product; the epilogue's coordinates
    # (the bias add) are unfolded from the row
    options = _options((64, 64, 16, 4, 4), switches)
    source = _check(options, ("B", 3, 21, 20), (20, 72), False, False, dims={"B": 2})
    assert "matmul A B: [63*B, 20] x [20, 72]" in source.split("\n")[1]
    _check(None, ("B", 37, 20), (72, 20), False, True, dims={"B": 3})


def test_split_k_over_a_symbolic_k_by_default(gl):
    # a weight gradient: X^T G over K = B*T rows, few output tiles: K-chunks across work groups
    source = _check(None, ("K", 130), ("K", 136), True, False, dims={"K": 2500}, seed=4, atol=5e-3)
    assert "K-chunks of 1024 across work groups" in source.split("\n")[1]


def test_few_tiles_split_k_in_the_familys_short_chunks(gl):
    # a prefill's projection: under a quarter of a wave of tiles over K = 1024; the NVIDIA rows
    # split it in chunks of 256 (more work groups), the default row keeps 1024 (no split)
    shapes = ((128, 1000), (1000, 132), False, False)
    nvidia = _check({"device": "NVIDIA H200"}, *shapes, seed=6, atol=1e-3)
    assert "K-chunks of 256 across work groups" in nvidia.split("\n")[1]
    plain = _check({"device": "llvmpipe (LLVM 15.0.7, 256 bits)"}, *shapes, seed=6, atol=1e-3)
    assert "K-chunks" not in plain.split("\n")[1]


@pytest.mark.parametrize("ta", [False, True])
def test_the_narrow_class_for_64_columns(gl, ta):
    # attention's P @ V (and dV = P^T dY): 64 columns over 128 rows or more take the table's
    # "narrow" row (on the H100: 128x64 tiles, 8x8 outputs an invocation)
    options = {"device": "NVIDIA H100 80GB HBM3"}
    source = _check(options, (2, 70, 256) if ta else (2, 256, 70), (2, 70, 64), ta, False, seed=5)
    head = source.split("\n")[1]
    assert "(NVIDIA H100, narrow)" in head and "128x64 tiles, 8x8 outputs" in head
