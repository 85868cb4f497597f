"""Kernel templates and the executor on GL: matmul variants at awkward sizes, random fused
graphs (with in-place updates) against the reference, 2D grids, and a broken shader."""

from __future__ import annotations

import numpy as np
import pytest
from gl_helpers import matmul_graph
from random_graphs import random_graph

from dlc.backends.reference import NumpyBackend
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.pipeline import compile_program
from dlc.compiler.reference import evaluate
from dlc.runtime.executor import Executor, LeafStore, group_counts
from dlc.runtime.spec import Grid

pytestmark = pytest.mark.gl


@pytest.mark.parametrize("variant", ["tile16", "direct", "rows", "medium", "big"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_variants_at_awkward_sizes(gl, variant, ta, tb):
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(0)
    m, k, n = 131, 21, 67  # no multiple of any tile; k spans two and a half K-slabs
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    g, y = matmul_graph(a_shape, b_shape, ta, tb, epilogue=True)
    feeds = {
        "a": rng.normal(size=a_shape).astype(np.float32),
        "w": rng.normal(size=b_shape).astype(np.float32),
        "bias": rng.normal(size=n).astype(np.float32),
    }
    backend = GLBackend({"matmul": variant})
    (got,) = backend.run(g, [y], feeds, {})
    want = evaluate(g, [y], feeds, {})[y]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    backend.close()


@pytest.mark.parametrize("variant", ["tile16", "direct", "rows", "medium", "big"])
def test_batched_symbolic_matmul_with_aligned_rows(gl, variant):
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(1)
    g, y = matmul_graph(("B", 9, 64), (64, 12), False, False, epilogue=False)
    backend = GLBackend({"matmul": variant})
    for batch in (3, 1):
        feeds = {
            "a": rng.normal(size=(batch, 9, 64)).astype(np.float32),
            "w": rng.normal(size=(64, 12)).astype(np.float32),
        }
        (got,) = backend.run(g, [y], feeds, {"B": batch})
        np.testing.assert_allclose(got, feeds["a"] @ feeds["w"], rtol=1e-4, atol=1e-4)
    backend.close()


@pytest.mark.parametrize("tb", [False, True])
def test_few_rows_take_the_rows_template_at_any_binding(gl, tb):
    """A decode step's x @ W (one row, planned at B = 1) takes `rows`; the same program at 5
    and 11 rows (more groups along y) and a K that is no multiple of its 32-way split."""
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(2)
    k, n = 203, 77
    g, y = matmul_graph(("B", k), (n, k) if tb else (k, n), False, tb, epilogue=True)
    backend = GLBackend()
    w = rng.normal(size=(n, k) if tb else (k, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    for batch in (1, 5, 11):
        a = rng.normal(size=(batch, k)).astype(np.float32)
        a[0, 3] = np.nan if batch == 5 else a[0, 3]  # a NaN reaches only its row
        (got,) = backend.run(g, [y], {"a": a, "w": w, "bias": bias}, {"B": batch})
        want = np.maximum(a.astype(np.float64) @ (w.T if tb else w).astype(np.float64) + bias, 0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if batch == 1:
            compiled, _ = backend.program(g, [y], False, {"B": 1})
            assert any("x 8 columns a work group, K split 32 ways" in kk.source for kk in compiled.kernels)
    backend.close()


def test_a_weight_gradient_planned_at_a_small_batch_runs_at_any(gl):
    """X^T G over K = B: planned at B = 4 (`direct`: each output's 4 terms from memory); a
    batch of 40 (a larger class) gets a program planned for it at once, and 3 the first's."""
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(4)
    g, y = matmul_graph(("B", 37), ("B", 19), True, False, epilogue=False)
    backend = GLBackend()
    heads = []
    for batch in (4, 40, 40, 3):
        a = rng.normal(size=(batch, 37)).astype(np.float32)
        w = rng.normal(size=(batch, 19)).astype(np.float32)
        (got,) = backend.step(g, [y], {"a": a, "w": w}, {"B": batch})
        np.testing.assert_allclose(got, a.T.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
        compiled, _ = backend.program(g, [y], True, {"B": batch})
        heads.append(compiled.kernels[0].source.split("\n")[1])
    assert "its K terms from memory" in heads[0] and "its K terms from memory" not in heads[1], heads
    assert heads[3] == heads[0] and len(backend._programs) == 2
    backend.close()


def test_direct_template_over_a_k_past_llvmpipes_loop_limit(gl):
    # 70000 terms an output, 16 an iteration (llvmpipe stops a loop after 65535 iterations)
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(5)
    g, y = matmul_graph((3, 70000), (70000, 5), False, False, epilogue=False)
    a = rng.normal(size=(3, 70000)).astype(np.float32)
    w = rng.normal(size=(70000, 5)).astype(np.float32)
    backend = GLBackend({"matmul": "direct"})
    (got,) = backend.run(g, [y], {"a": a, "w": w}, {})
    backend.close()
    np.testing.assert_allclose(got, a.astype(np.float64) @ w, rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize(
    "a_shape,b_shape,ta,tb",
    [
        ((3, 2, 70), (3, 70, 20), False, False),  # batched both
        ((3, 70, 2), (1, 20, 70), True, True),  # both transposed, B broadcast over the batch
        ((2, 3, 5, 90), (3, 90, 33), False, False),  # two batch dims, B's broadcast onto them
    ],
)
def test_rows_template_over_batches(gl, a_shape, b_shape, ta, tb):
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(3)
    g, y = matmul_graph(a_shape, b_shape, ta, tb, epilogue=True)
    feeds = {
        "a": rng.normal(size=a_shape).astype(np.float32),
        "w": rng.normal(size=b_shape).astype(np.float32),
        "bias": rng.normal(size=g.nodes[y].shape[-1]).astype(np.float32),
    }
    backend = GLBackend()
    (got,) = backend.run(g, [y], feeds, {})
    compiled, _ = backend.program(g, [y], False, {})
    assert "columns a work group, K split 32 ways" in compiled.kernels[0].source.split("\n")[1]
    backend.close()
    np.testing.assert_allclose(got, evaluate(g, [y], feeds, {})[y], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(16))
def test_random_fused_graphs_step_like_the_reference(backend, seed):
    g, roots = random_graph(seed)
    rng = np.random.default_rng(seed)
    values = {"w": rng.normal(0, 0.5, (4, 3)).astype(np.float32), "c": rng.normal(0, 0.5, 3).astype(np.float32)}
    ref = NumpyBackend()
    for name, v in values.items():
        backend.set_leaf(name, v)
        ref.set_leaf(name, v)
    for batch in (5, 2):  # planned at 5; a smaller binding reuses the same program
        feeds = {
            "x": rng.normal(size=(batch, 4)).astype(np.float32),
            "y": rng.normal(size=(batch, 3)).astype(np.float32),
            "s": rng.normal(size=4).astype(np.float32),
        }
        got = backend.step(g, roots, feeds, {"B": batch})
        want = ref.step(g, roots, feeds, {"B": batch})
        for r, u, v in zip(roots, got, want):
            np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4, err_msg=f"%{r} seed {seed}")
        for name in values:
            np.testing.assert_allclose(
                backend.get_leaf(name), ref.get_leaf(name), rtol=1e-4, atol=1e-4, err_msg=f"update of {name}"
            )


def test_group_counts_beyond_the_limit_become_a_2d_grid():
    limit = (100, 100, 100)
    assert group_counts(Grid.from_json({"flat": [1000], "per_group": 10}), {}, limit) == (100, 1, 1)
    x, y, z = group_counts(Grid.from_json({"flat": [3, "B"], "per_group": 1}), {"B": 1001}, limit)
    assert x <= 100 and y <= 100 and x * y >= 3003 and z == 1
    tiles = Grid.from_json({"tiles": [[[67], 16], [[1, "B"], 16], [[1], 1]]})
    assert group_counts(tiles, {"B": 33}, limit) == (5, 3, 1)


def test_kernels_cover_every_element_on_a_2d_grid(gl):
    # A tiny limit forces the split the GPU needs past 65535 groups, on a small tensor.
    b = GraphBuilder()
    x = b.input("x", (1037,))
    y = b.add("exp", [b.add("neg", [x])])
    s = b.add("sum", [x], axes=(0,), keepdims=False)
    prog = compile_program(b.build(), [y, s])
    ex = Executor(prog.spec, prog.sources, LeafStore())
    ex.limits = {**ex.limits, "max_work_group_count": (3, 65535, 65535)}
    xs = np.linspace(-2, 2, 1037).astype(np.float32)
    got_y, got_s = ex.run({"x": xs}, {}, [y, s])
    assert any(launch.groups[1] > 1 for launch in ex._launches)
    np.testing.assert_allclose(got_y, np.exp(-xs), rtol=1e-6)
    np.testing.assert_allclose(got_s, xs.sum(), atol=1e-3)
    ex.delete()


def test_a_broken_shader_is_a_clear_internal_error(gl):
    from dlc.runtime.program import ShaderError

    b = GraphBuilder()
    x = b.input("x", (5,))
    y = b.add("sigmoid", [x])
    prog = compile_program(b.build(), [y])
    (file,) = prog.sources
    broken = prog.sources[file].replace("dlc_sigmoid(n0)", "dlc_sigmoid(n0, )")
    with pytest.raises(ShaderError) as info:
        Executor(prog.spec, {file: broken}, LeafStore())
    text = str(info.value)
    assert "internal dlc error" in text and "k00_sigmoid" in text
    assert "dlc_sigmoid(n0, )" in text  # the bad line is shown


# Fused layout chains whose reshapes receive coordinates (after a transpose, a slice or a
# broadcast): index.reshape_coords maps them group by group of axes, or falls back to the flat
# index where symbolic axes do not line up. Each chain ends in an elementwise op so that the
# whole chain is one kernel.
LAYOUT_CHAINS = [
    # the qkv split of heads: [B, T, 3C] -> slice -> [B, T, H, D] -> [B, H, T, D]
    (
        "heads",
        ("B", "T", 24),
        [("slice", (0, 0, 8), ("B", "T", 8)), ("reshape", ("B", "T", 2, 4)), ("transpose", (0, 2, 1, 3))],
    ),
    # and back: [B, H, T, D] -> [B, T, H, D] -> [B, T, H * D] (read transposed)
    ("merge", ("B", 2, "T", 4), [("transpose", (0, 2, 1, 3)), ("reshape", ("B", "T", 8)), ("transpose", (0, 2, 1))]),
    # a merge of literal axes fed by a transpose, then a split into other literal axes
    ("regroup", ("B", 4, 6), [("transpose", (0, 2, 1)), ("reshape", ("B", 3, 8)), ("transpose", (0, 2, 1))]),
    # symbolic axes that do not line up: the flat index
    ("flat", ("B", "T", 6), [("transpose", (1, 0, 2)), ("reshape", ("B", "T", 6)), ("transpose", (0, 2, 1))]),
    # size-1 axes on either side
    ("ones", ("B", 1, 12), [("transpose", (0, 2, 1)), ("reshape", ("B", 3, 1, 4)), ("transpose", (3, 1, 2, 0))]),
]


@pytest.mark.parametrize("name,shape,chain", LAYOUT_CHAINS, ids=[c[0] for c in LAYOUT_CHAINS])
def test_fused_layout_chains_read_what_numpy_reads(backend, name, shape, chain):
    b = GraphBuilder()
    x = b.input("x", shape)
    y = x
    for op, arg, *rest in chain:
        if op == "slice":
            y = b.add("slice", [y], begin=arg, size=rest[0])
        elif op == "reshape":
            y = b.add("reshape", [y], shape=arg)
        else:
            y = b.add("transpose", [y], perm=arg)
    y = b.add("mul", [y, b.const(2.0)])
    g = b.build()
    for dims in ({"B": 3, "T": 5}, {"B": 2, "T": 7}):
        concrete = tuple(dims.get(d, d) for d in shape)
        feeds = {"x": np.random.default_rng(1).normal(size=concrete).astype(np.float32)}
        (got,) = backend.run(g, [y], feeds, dims)
        np.testing.assert_array_equal(got, evaluate(g, [y], feeds, dims)[y], err_msg=f"{name} {dims}")
