"""conv2d and its gradients as implicit GEMMs (compiler/codegen/kernels_conv.py) at awkward
sizes, with every blocking of the matmul template and a fused epilogue, against the NumPy
reference; and the automatic choice between the GEMM and the direct kernel."""

from __future__ import annotations

import numpy as np
import pytest

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.ops.window import window_pads
from dlc.compiler.reference import evaluate

pytestmark = pytest.mark.gl

GEOMETRIES = [
    # channels a multiple of 4 (the vec4 reads), stride, dilation and explicit padding
    ((2, 9, 7, 8), (3, 3, 8, 12), {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (2, 1)}),
    ((3, 6, 6, 4), (2, 2, 4, 8), {"stride": (2, 2), "padding": "valid"}),
    ((1, 5, 6, 5), (3, 3, 5, 4), {"stride": (1, 2), "padding": (0, 2, 1, 1), "dilation": (1, 2)}),
]
BLOCKINGS = [
    None,
    (16, 16, 64, 4, 4, 16),
    (128, 64, 16, 8, 4, 1, False),
    # a whole variant of the matmul table's form: double-buffered slabs, warp tiles
    {"blocking": (64, 64, 16, 4, 4), "double_buffer": True, "warp": (4, 8)},
    # switches alone, over the blocking the conv chooses: im2col rows kept along K
    {"along_k": True, "unroll": True},
]


def _graph(op, xs, ws, attrs, batch_symbolic=False):
    if op == "conv2d":
        shapes, extra = [xs, ws], {}
    else:
        oh, ow = window_pads(xs, ws[:2], attrs)[:2]
        dy = (xs[0], oh, ow, ws[3])
        shapes, extra = ([dy, ws], {"x_shape": xs}) if op == "conv2d_grad_input" else ([xs, dy], {"w_shape": ws})
    b = GraphBuilder()
    # every operand but the filter has the batch axis
    ids = [b.input(f"a{i}", ("B", *s[1:]) if batch_symbolic and s is not ws else s) for i, s in enumerate(shapes)]
    y = b.add(op, ids, **attrs, **extra)
    out = b.add("relu", [b.add("sub", [y, b.const(0.25)])])  # a fused epilogue
    return b.build(), out, shapes


@pytest.mark.parametrize("blocking", BLOCKINGS, ids=str)
@pytest.mark.parametrize("geo", range(len(GEOMETRIES)))
@pytest.mark.parametrize("op", ["conv2d", "conv2d_grad_input", "conv2d_grad_filter"])
def test_conv_gemm_matches_reference(gl, op, geo, blocking):
    from dlc.backends.gl import GLBackend

    xs, ws, attrs = GEOMETRIES[geo]
    g, y, shapes = _graph(op, xs, ws, attrs)
    rng = np.random.default_rng(geo)
    feeds = {f"a{i}": rng.normal(size=s).astype(np.float32) for i, s in enumerate(shapes)}
    options = {"conv": "gemm"} if blocking is None else {"conv": "gemm", "conv_blocking": blocking}
    backend = GLBackend(options)
    (got,) = backend.run(g, [y], feeds, {})
    want = evaluate(g, [y], feeds, {})[y]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    backend.close()


def test_switches_alone_apply_over_the_chosen_blocking():
    big = ((16, 14, 14, 32), (5, 5, 32, 64), {"stride": (1, 1), "padding": "same"})
    plain = _kernel_line("conv2d", *big)
    head = _kernel_line("conv2d", *big, options={"conv_blocking": {"along_k": True}})
    assert "A kept along K" in head and "A kept along K" not in plain
    assert head.split(" tiles")[0] == plain.split(" tiles")[0]  # the same blocking


def test_symbolic_batch_through_the_gemm(gl):
    from dlc.backends.gl import GLBackend

    xs, ws, attrs = GEOMETRIES[1]
    for op in ("conv2d", "conv2d_grad_input", "conv2d_grad_filter"):
        g, y, shapes = _graph(op, xs, ws, attrs, batch_symbolic=True)
        backend = GLBackend({"conv": "gemm"})
        for batch in (2, 3):
            rng = np.random.default_rng(batch)
            feeds = {
                f"a{i}": rng.normal(size=(batch, *s[1:]) if s is not ws else s).astype(np.float32)
                for i, s in enumerate(shapes)
            }
            (got,) = backend.run(g, [y], feeds, {"B": batch})
            want = evaluate(g, [y], feeds, {"B": batch})[y]
            np.testing.assert_allclose(
                got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), err_msg=f"{op} B={batch}"
            )
        backend.close()


def _kernel_line(op, xs, ws, attrs, options=None):
    from dlc.compiler.pipeline import compile_program

    g, y, _ = _graph(op, xs, ws, attrs)
    prog = compile_program(g, [y], options=options)
    return prog.kernels[0].source.split("\n")[1]


def test_large_convs_take_the_gemm_and_small_ones_the_direct_kernel():
    big = ((16, 14, 14, 32), (5, 5, 32, 64), {"stride": (1, 1), "padding": "same"})
    for op in ("conv2d", "conv2d_grad_input", "conv2d_grad_filter"):
        assert "implicit GEMM" in _kernel_line(op, *big), op
        assert "implicit GEMM" not in _kernel_line(op, *big, options={"conv": "direct"}), op
    deep = ((1, 7, 7, 128), (3, 3, 128, 64), {"stride": (1, 1), "padding": "same"})  # few rows, wide and deep
    assert "implicit GEMM" in _kernel_line("conv2d", *deep)
    small = ((2, 5, 5, 3), (3, 3, 3, 4), {"stride": (1, 1), "padding": "same"})
    assert "implicit GEMM" not in _kernel_line("conv2d", *small)
    grouped = ((2, 9, 9, 8), (3, 3, 4, 8), {"stride": (1, 1), "padding": "same", "groups": 2})
    assert "implicit GEMM" not in _kernel_line("conv2d", *grouped, options={"conv": "gemm"})


def _run_twice(op, xs, ws, attrs, options, seeds=(0, 1), batch_symbolic=False, batch=None):
    """The kernel on two sets of feeds, each against the reference; then the first feeds
    again, which must give the same bits (split-K adds its partials in a fixed order)."""
    from dlc.backends.gl import GLBackend

    g, y, shapes = _graph(op, xs, ws, attrs, batch_symbolic=batch_symbolic)
    backend = GLBackend(options)
    dims = {"B": batch} if batch_symbolic else {}
    got = []
    for seed in (*seeds, seeds[0]):
        rng = np.random.default_rng(seed)
        feeds = {
            f"a{i}": rng.normal(size=((batch or s[0]), *s[1:]) if s is not ws else s).astype(np.float32)
            for i, s in enumerate(shapes)
        }
        (out,) = backend.run(g, [y], feeds, dims)
        want = evaluate(g, [y], feeds, dims)[y]
        np.testing.assert_allclose(
            out, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), err_msg=f"{op} {options} seed {seed}"
        )
        got.append(out)
    backend.close()
    assert np.array_equal(got[0], got[-1]), "split-K sums differ between two runs"


@pytest.mark.parametrize("blocking", [(16, 16, 64, 4, 4, 16), (64, 64, 32, 4, 4), (128, 32, 32, 8, 4, 2)], ids=str)
@pytest.mark.parametrize("op", ["conv2d", "conv2d_grad_input", "conv2d_grad_filter"])
def test_split_k_across_work_groups(gl, op, blocking):
    # geometry 0: K is 72 (forward), 108 (input gradient), 80 (filter gradient): 2 to 4
    # chunks of one K-slab each, the last one partial
    xs, ws, attrs = GEOMETRIES[0]
    options = {"conv": "gemm", "conv_blocking": blocking, "conv_split": blocking[2]}
    assert "K-chunks" in _kernel_line(op, xs, ws, attrs, options)
    _run_twice(op, xs, ws, attrs, options)


def test_split_k_with_a_symbolic_batch(gl):
    # the number of K-chunks (the grid's z) follows the batch bound at run time
    xs, ws, attrs = GEOMETRIES[1]
    options = {"conv": "gemm", "conv_blocking": (16, 16, 64, 4, 4, 16), "conv_split": 64}
    for batch in (3, 9):
        _run_twice("conv2d_grad_filter", xs, ws, attrs, options, batch_symbolic=True, batch=batch)


def test_a_small_filter_over_a_long_sum_splits_k_by_itself(gl):
    # [3, 3, 1, 8] from 8 images of 16 x 16: one 16x16 tile, K = 2048 in 4 chunks
    xs, ws, attrs = (8, 16, 16, 1), (3, 3, 1, 8), {"stride": (1, 1), "padding": "same"}
    line = _kernel_line("conv2d_grad_filter", xs, ws, attrs)
    assert "K-chunks of 512" in line, line
    _run_twice("conv2d_grad_filter", xs, ws, attrs, {})
    # [3, 3, 16, 64]: 144 x 64 outputs in two 128x64 tiles, K = 576 in 2 chunks
    xs, ws = (4, 12, 12, 16), (3, 3, 16, 64)
    line = _kernel_line("conv2d_grad_filter", xs, ws, attrs)
    assert "128x64 tiles" in line and "K-chunks of 288" in line, line
    _run_twice("conv2d_grad_filter", xs, ws, attrs, {})


def test_a_conv_of_one_to_two_waves_splits_a_long_k_only():
    # ResNet-50's 14x14x256 3x3 convs at batch 32: 196 tiles of 128x64 (1.5 waves), K = 2304:
    # two chunks of 1152; its 28x28x128 convs: K = 1152, kept whole (each chunk's loop short)
    same = {"stride": (1, 1), "padding": "same"}
    line = _kernel_line("conv2d", (32, 14, 14, 256), (3, 3, 256, 256), same)
    assert "128x64 tiles" in line and "K-chunks of 1152" in line, line
    line = _kernel_line("conv2d", (32, 28, 28, 128), (3, 3, 128, 128), same)
    assert "K-chunks" not in line, line


def test_thin_tiles_for_an_input_gradient_with_few_channels(gl):
    # 24 input channels (n = 24: a 32-wide tile, part empty), 48 x 48 pixels: rows past the
    # last full tile and columns past n
    xs, ws, attrs = (2, 48, 45, 24), (3, 3, 24, 8), {"stride": (1, 1), "padding": "same"}
    line = _kernel_line("conv2d_grad_input", xs, ws, attrs)
    assert "128x32 tiles" in line, line
    _run_twice("conv2d_grad_input", xs, ws, attrs, {})


def test_the_cnn_steps_slow_kernels_take_thin_tiles_and_split_k():
    # the CNN at batch 256: the 32->64 input gradient has only 32 columns (thin
    # 128x32 tiles, not the direct kernel), the 1->32 and 32->64 filter gradients have few
    # tiles over a K of 200704 and 50176 (split across work groups)
    same = {"stride": (1, 1), "padding": "same"}
    line = _kernel_line("conv2d_grad_input", (256, 14, 14, 32), (5, 5, 32, 64), same)
    assert "implicit GEMM" in line and "128x32 tiles" in line, line
    for xs, ws in (((256, 28, 28, 1), (5, 5, 1, 32)), ((256, 14, 14, 32), (5, 5, 32, 64))):
        line = _kernel_line("conv2d_grad_filter", xs, ws, same)
        assert "K-chunks" in line, line


@pytest.mark.parametrize("op", ["conv2d", "conv2d_grad_input"])
def test_a_deep_stage_at_batch_one_takes_the_split_gemm(gl, op):
    # ResNet's last stage at batch 1 has 49 output rows: 64-row tiles, part idle, and K split
    # across work groups, chosen automatically; planned for a symbolic batch of 1, run at 1 and 3
    xs, ws, attrs = (1, 7, 7, 64), (3, 3, 64, 64), {"stride": (1, 1), "padding": "same"}
    line = _kernel_line(op, xs, ws, attrs)
    assert "implicit GEMM" in line and "K-chunks" in line, line
    _run_twice(op, xs, ws, attrs, {})
    _run_twice(op, xs, ws, attrs, {}, batch_symbolic=True, batch=3)
