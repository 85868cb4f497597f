"""Launches within the device's limits, on GL: reductions longer than one invocation may loop
(llvmpipe stops an invocation after 65535 loop iterations in all), grids wrapped onto y and z
when the device allows few work groups per axis, and sizes refused before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.codegen import kernels_reduce

pytestmark = pytest.mark.gl


def run_both(source: str, feeds: dict, fetch: list[str]) -> tuple[list, list]:
    """The fetches on GL and on the NumPy reference."""
    model = dlc.compile(source)
    gl = dlc.Session(model, backend="gl").eval(fetch, feeds)
    ref = dlc.Session(model, backend="numpy").eval(fetch, feeds)
    return [gl[f] for f in fetch], [ref[f] for f in fetch]


def test_reduction_over_2_pow_24_plus_1_elements(gl):
    # Values whose float32 sum is exact in any order: 2^23 ones, a 3 at the very end.
    n = 2**24 + 1
    x = np.zeros(n, np.float32)
    x[: 2**23] = 1.0
    x[-1] = 3.0
    model = dlc.compile("input x: [N]\ns = sum(x)\n")
    (s,) = dlc.Session(model, backend="gl").eval(["s"], {"x": x}).values()
    assert s == 2**23 + 3 == x.astype(np.float64).sum()


def test_argmax_over_2_pow_24_plus_1_elements(gl):
    n = 2**24 + 1
    x = np.zeros(n, np.float32)
    x[[5, n - 1]] = 7.0  # the first maximum wins
    x[2**24 - 1] = 6.0
    model = dlc.compile("input x: [N]\ni = argmax(x, axis=0)\n")
    (i,) = dlc.Session(model, backend="gl").eval(["i"], {"x": x}).values()
    assert i == 5
    x[5] = 0.0
    (i,) = dlc.Session(model, backend="gl").eval(["i"], {"x": x}).values()
    assert i == n - 1 == np.argmax(x)


def test_sum_over_axis_0_of_2_pow_20_plus_1_rows(gl):
    rows = 2**20 + 1
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(rows, 20)).astype(np.float32)  # integer sums: exact
    model = dlc.compile("input x: [B, 20]\ns = sum(x, axis=0)\n")
    (s,) = dlc.Session(model, backend="gl").eval(["s"], {"x": x}).values()
    np.testing.assert_array_equal(s, x.astype(np.float64).sum(axis=0))


REDUCTIONS = [
    ("sum(x)", "all"),
    ("max(x)", "all"),
    ("min(x)", "all"),
    ("argmin(x, axis=2)", "inner"),
    ("sum(x, axis=2)", "inner"),
    ("min(x, axis=2)", "inner"),
    ("argmax(x, axis=2)", "inner"),
    ("sum(x, axis=0)", "outer"),
    ("max(x, axis=0)", "outer"),
    ("argmax(x, axis=0)", "outer"),
    ("sum(x, axis=1)", "middle"),
    ("argmin(x, axis=1)", "middle"),
    ("mean(exp(x * 0.1), axis=[0, 2])", "outer and inner"),
]


@pytest.mark.parametrize("expr, where", REDUCTIONS)
def test_split_reductions_match_the_reference(gl, monkeypatch, expr, where):
    # Chunks of 2 iterations an invocation: every long reduction here is split, many chunks
    # an output, so the scratch partials and the last group's combining are exercised.
    monkeypatch.setattr(kernels_reduce, "CHUNK_ITERS", 2)
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, size=(600, 3, 700)).astype(np.float32)  # integer sums: exact
    (got,), (want,) = run_both(f"input x: [B, 3, 700]\ny = {expr}\n", {"x": x}, ["y"])
    # exp makes the mean inexact: float32 sums in another order (and NVIDIA's exp) differ by ~1e-6
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{expr} over the {where} axis")
    # The same program again: the counters were reset for the next launch.
    (again,), _ = run_both(f"input x: [B, 3, 700]\ny = {expr}\n", {"x": x}, ["y"])
    np.testing.assert_array_equal(again, got)


def test_split_reduction_in_eager_ops(gl, monkeypatch):
    monkeypatch.setattr(kernels_reduce, "CHUNK_ITERS", 2)
    x = np.arange(5003, dtype=np.float32) % 7
    dlc.set_backend("gl")
    try:
        got = dlc.ops.sum(dlc.array(x)).numpy()
    finally:
        dlc.set_backend(None)
    assert float(got) == x.astype(np.float64).sum()


KINDS = {
    "elementwise": ("input x: [B, 70]\ny = tanh(x * 0.5) + x\n", {"x": (90, 70)}),
    "reduce all": ("input x: [B, 70]\ny = sum(x) + max(x)\n", {"x": (90, 70)}),
    "reduce inner": ("input x: [B, 70]\ny = sum(x, axis=1)\n", {"x": (900, 70)}),
    "reduce inner, short": ("input x: [B, 7]\ny = max(x, axis=1)\n", {"x": (2000, 7)}),
    "reduce outer": ("input x: [B, 700]\ny = sum(x, axis=0)\n", {"x": (90, 700)}),
    "reduce outer, argmax": ("input x: [B, 700]\ny = argmax(x, axis=0)\n", {"x": (90, 700)}),
    "matmul": ("input x: [B, 37]\ninput w: [37, 150]\ny = x @ w\n", {"x": (300, 37), "w": (37, 150)}),
    "batched matmul": (
        "input x: [B, 20, 37]\ninput w: [B, 37, 40]\ny = matmul(x, w)\n",
        {"x": (30, 20, 37), "w": (30, 37, 40)},
    ),
    "window": (
        "input x: [B, 12, 12, 3]\ninput w: [3, 3, 3, 4]\ny = conv2d(x, w)\nz = max_pool(x, 2)\n",
        {"x": (20, 12, 12, 3), "w": (3, 3, 3, 4)},
    ),
    "layout": ("input x: [B, 30, 20]\ny = transpose(x, [2, 0, 1]) * 2\n", {"x": (40, 30, 20)}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kernel_kind_under_a_small_group_count_limit(gl, monkeypatch, kind):
    # At most 3 work groups per axis: every launch here needs more, so its grid is wrapped.
    monkeypatch.setitem(gl.limits, "max_work_group_count", (3, 3, 65535))
    source, shapes = KINDS[kind]
    rng = np.random.default_rng(2)
    feeds = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    fetch = ["y", "z"] if "z =" in source else ["y"]
    got, want = run_both(source, feeds, fetch)
    for g, w, name in zip(got, want, fetch):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{kind}: {name}")


def test_a_grid_too_large_for_every_axis_is_refused(gl, monkeypatch):
    monkeypatch.setitem(gl.limits, "max_work_group_count", (2, 2, 2))
    model = dlc.compile("input x: [B]\ny = x * 2\n")
    with pytest.raises(dlc.DlcError, match="work groups do not fit"):
        dlc.Session(model, backend="gl").eval("y", {"x": np.zeros(256 * 9, np.float32)})


def test_a_bound_tensor_over_2_pow_31_elements_is_refused_naming_it(gl):
    model = dlc.compile("input x: [B, 7000, 4000]\ny = sum(x * 2)\n")
    # A broadcast view: nothing of that size is ever allocated.
    x = np.broadcast_to(np.float32(1), (77, 7000, 4000))
    with pytest.raises(dlc.DataError) as err:
        dlc.Session(model, backend="gl").eval("y", {"x": x})
    text = str(err.value)
    assert "input 'x' [B, 7000, 4000] with B = 77" in text and "2,156,000,000 elements" in text


def test_a_slot_over_the_storage_block_limit_is_refused_naming_the_tensor(gl, monkeypatch):
    monkeypatch.setitem(gl.limits, "max_ssbo_size", 4000)
    model = dlc.compile("input x: [B]\ny = exp(x)\n")
    dlc.Session(model, backend="gl").eval("y", {"x": np.zeros(1000, np.float32)})  # 4000 bytes
    with pytest.raises(
        dlc.DataError,
        match=r"input 'x' \[B\] with B = 1001 needs 4,004 bytes, more "
        r"than this GPU's 4,000-byte storage block limit",
    ):
        dlc.Session(model, backend="gl").eval("y", {"x": np.zeros(1001, np.float32)})


def test_out_of_gpu_memory_names_the_program_and_bytes(gl, monkeypatch):
    from dlc.runtime import storage

    model = dlc.compile("input x: [B]\ny = exp(x)\n")
    sess = dlc.Session(model, backend="gl")
    real = storage.GL.glGetError
    monkeypatch.setattr(storage.GL, "glGetError", lambda: storage.GL.GL_OUT_OF_MEMORY)
    try:
        with pytest.raises(
            dlc.DlcError,
            match=r"out of GPU memory running program 'eval': "
            r"allocating 12,348 bytes",
        ):
            sess.eval("y", {"x": np.zeros(3087, np.float32)})
    finally:
        monkeypatch.setattr(storage.GL, "glGetError", real)


@pytest.mark.parametrize("expr", ["sum(x, axis=1)", "argmin(x, axis=1)"])
def test_a_long_middle_axis_with_many_outputs_is_not_one_invocations_loop(gl, expr):
    # 300 outputs of 5000 elements each: past THREAD_MAX, so a work group an output, not one
    # invocation looping over the 5000.
    assert 5000 > kernels_reduce.THREAD_MAX
    rng = np.random.default_rng(3)
    x = rng.integers(-50, 50, size=(30, 5000, 10)).astype(np.float32)
    (got,), (want,) = run_both(f"input x: [B, 5000, 10]\ny = {expr}\n", {"x": x}, ["y"])
    np.testing.assert_array_equal(got, want)


def test_a_matmul_over_a_long_k_is_exact(gl):
    # K = 70000: one invocation's loop would pass llvmpipe's 65535-iteration cap; the product is
    # split across work groups (kernels_matmul.LONG_K) and the relu epilogue runs once.
    rng = np.random.default_rng(3)
    a = rng.integers(-2, 3, size=(64, 70000)).astype(np.float32)  # integer sums: exact
    b = rng.integers(-2, 3, size=(70000, 64)).astype(np.float32)
    model = dlc.compile("input a: [64, 70000]\ninput b: [70000, 64]\nc = relu(a @ b)\n")
    (c,) = dlc.Session(model, backend="gl").eval(["c"], {"a": a, "b": b}).values()
    np.testing.assert_array_equal(c, np.maximum(a.astype(np.float64) @ b, 0))


def test_a_sum_of_many_inputs_fits_the_storage_block_limit(gl):
    # 60 inputs in one elementwise chain would bind 61 storage buffers (GL gives 16): fusion
    # cuts the chain into kernels within the device's storage blocks (compiler/limits.py).
    n = 60
    src = "".join(f"input x{i}: [B]\n" for i in range(n)) + "y = " + " + ".join(f"x{i}" for i in range(n)) + "\n"
    feeds = {f"x{i}": np.full(5, i, np.float32) for i in range(n)}
    got = dlc.Session(dlc.compile(src), backend="gl").eval("y", feeds)
    np.testing.assert_array_equal(got, np.full(5, sum(range(n)), np.float32))


def test_training_many_params_fits_the_storage_block_limit(gl):
    # 30 scalar params: their updates would be one kernel writing 30 outputs and reading more
    n = 30
    src = "input x: [B]\ninput t: [B]\n" + "".join(f"param p{i}: [] = 0.1\n" for i in range(n))
    src += "y = " + " + ".join(f"p{i} * x" for i in range(n)) + "\nloss cost = mean_squared(y, t)\n"
    model = dlc.compile(src)
    x = np.linspace(-1, 1, 16).astype(np.float32)
    losses = {
        b: dlc.Session(model, backend=b, seed=0).train(
            {"x": x, "t": 2 * x}, optimizer=dlc.Adam(0.01), batch_size=16, steps=5
        )
        for b in ("numpy", "gl")
    }
    np.testing.assert_allclose(losses["gl"], losses["numpy"], rtol=1e-4, atol=1e-5)
