"""Numerics GL drivers get wrong, against NumPy: sin/cos/tan of large arguments (range
reduction), sums and means whose partial sums overflow, subnormal floats.

Runs on the compute target here and on the texture target in a subprocess
(test_texture_target.py's SUITES), with the NumPy backend beside GL where a case is the
user's (a Session over a .dl model).
"""

from __future__ import annotations

import numpy as np
import pytest
from gl_helpers import fragment_compile_log

import dlc
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.codegen import kernels_reduce, texture
from dlc.compiler.emit import programs
from dlc.compiler.reference import evaluate
from dlc.runtime import subnormals
from dlc.runtime.info import describe

pytestmark = pytest.mark.gl

F32 = np.float32
TINY = np.finfo(F32).tiny  # the smallest normal float, 1.2e-38


def run_op(backend, op: str, *xs: np.ndarray, **attrs) -> tuple[np.ndarray, np.ndarray]:
    """(GL's, the NumPy reference's) `op` of `xs`."""
    b = GraphBuilder()
    ids = [b.input(f"x{k}", x.shape) for k, x in enumerate(xs)]
    y = b.add(op, ids, **attrs)
    g = b.build()
    feeds = {f"x{k}": np.asarray(x, F32) for k, x in enumerate(xs)}
    (got,) = backend.run(g, [y], feeds, {})
    with np.errstate(all="ignore"):
        want = evaluate(g, [y], feeds, {})[y]
    return got, want


# -- sin, cos, tan ---------------------------------------------------------------------------


def trig_arguments() -> np.ndarray:
    """Floats of every exponent from 2^-10 up to the largest, both signs, and the hard ones."""
    rng = np.random.default_rng(7)
    exponents = rng.integers(117, 255, size=3000, dtype=np.uint32)  # 2^-10 .. 2^127
    bits = (exponents << 23) | rng.integers(0, 1 << 23, size=3000, dtype=np.uint32)
    bits |= rng.integers(0, 2, size=3000, dtype=np.uint32) << 31
    hard = [
        3e38,
        -3e38,
        np.finfo(F32).max,
        1e8,
        1e30,
        -1e30,
        16367173 * 2.0**72,  # among the floats nearest a multiple of pi/2
        np.pi,
        np.pi / 2,
        np.pi / 4,
        0.7853982,
        -1.5707964,
        100.0,
        12345.678,
        2.0**24,
    ]
    return np.concatenate([bits.view(F32), np.array(hard, F32)])


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trig_of_any_float_matches_numpy_to_2_ulp_of_the_reduced_argument(backend, op):
    x = trig_arguments()
    got, want = run_op(backend, op, x)
    x64 = x.astype(np.float64)
    # The reduced argument r (|r| <= pi/4, from float64, which reduces exactly): an error of
    # 2 ulp in r moves the result by 2 ulp(r) |f'(x)|; a result is also allowed 2 of its ulps.
    s, c = np.abs(np.sin(x64)), np.abs(np.cos(x64))
    r = np.minimum(np.arcsin(np.minimum(s, 1)), np.arcsin(np.minimum(c, 1)))
    slope = {"sin": c, "cos": s, "tan": 1 + np.tan(x64) ** 2}[op]
    tol = 2 * np.spacing(r.astype(F32)) * slope + 2 * np.spacing(np.abs(want))
    err = np.abs(got.astype(np.float64) - want)
    worst = int(np.argmax(err / tol))
    assert (err <= tol).all(), f"{op}({x[worst]!r}) = {got[worst]!r} on GL, {want[worst]!r} in NumPy"


def test_sin_of_huge_arguments_in_a_model_matches_numpy():
    model = dlc.compile("input x: [4]\ns = sin(x)\nc = cos(x)\nt = tan(x)\n")
    x = np.array([3e38, 1e30, 1e8, -3e38], F32)
    gl = dlc.Session(model, backend="gl").eval(["s", "c", "t"], {"x": x})
    ref = dlc.Session(model, backend="numpy").eval(["s", "c", "t"], {"x": x})
    np.testing.assert_allclose(ref["s"][0], 0.8749049, rtol=1e-6)  # NumPy's, which GL matches
    for name in ("s", "c", "t"):
        np.testing.assert_allclose(gl[name], ref[name], rtol=1e-6, err_msg=name)


def test_numerics_helpers_compile_as_glsl_es_300(gl):
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    model = dlc.compile(
        "input x: [B, 3]\n"
        "y = sin(x) + cos(x) + tan(x) + log(x) + pow(x, x) + mod(x, 3)\n"
        "m = mean(y)\n"
        "z = sum(y, axis=0)\n"
    )
    progs = programs(model, target="texture", options={"es": True})
    sources = [(f, t) for p in progs.values() for f, t in p.sources.items()]
    assert any("dlc_trig_reduce" in t for _, t in sources) and any("dlc_down32" in t for _, t in sources)
    for file, text in sources:
        assert fragment_compile_log(text) == "", file


# -- sums and means that overflow on the way -----------------------------------------------

BIG = 3e38


def _rows(n: int) -> list[np.ndarray]:
    """Rows of n terms holding +-3e38: their exact sums are finite, overflow, or are NaN."""
    rng = np.random.default_rng(n)
    noise = rng.normal(size=n)
    k = np.arange(n)
    alternating = noise.copy()
    alternating[: n // 2 * 2] = np.where(k[: n // 2 * 2] % 2 == 0, BIG, -BIG)  # NumPy 0 down columns
    halves = noise.copy()
    halves[: n // 2 * 2] = np.where(k[: n // 2 * 2] < n // 2, BIG, -BIG)
    pairs = noise.copy()
    pairs[:4] = [BIG, BIG, -BIG, -BIG]
    over = noise.copy()
    over[:3] = BIG  # 9e38: overflows however it is summed
    under = -over
    with_inf = alternating.copy()
    with_inf[n // 2] = np.inf
    with_nan = pairs.copy()
    with_nan[-1] = np.nan
    both_infs = noise.copy()
    both_infs[[0, -1]] = [np.inf, -np.inf]
    return [alternating, halves, pairs, over, under, with_inf, with_nan, both_infs]


def _check_sums(got: np.ndarray, rows: np.ndarray, what: str) -> None:
    """Each row's sum: NaN where a term is NaN or both infinities are, an infinity where a term
    is, +-inf where the exact sum is past float32's range, else finite and within float32's
    error bound for a sum in any order (n 2^-23 sum |x|) of the exact sum."""
    rows64 = rows.astype(np.float64)
    for i, (g, row) in enumerate(zip(got, rows64)):
        label = f"{what}, row {i}"
        nan = np.isnan(row).any() or (np.isposinf(row).any() and np.isneginf(row).any())
        if nan:
            assert np.isnan(g), f"{label}: {g}, not NaN"
            continue
        if np.isinf(row).any():
            assert g == row[np.isinf(row)][0], f"{label}: {g}, not the term's infinity"
            continue
        exact = row.sum()
        if abs(exact) > 3.5e38:
            assert g == np.copysign(np.inf, exact), f"{label}: {g}, the exact sum {exact} overflows"
            continue
        bound = len(row) * 2.0**-23 * np.abs(row).sum()
        assert np.isfinite(g) and abs(g - exact) <= bound, f"{label}: {g}, exact {exact} (error bound {bound:.3g})"


GEOMETRIES = {  # (rows of length n along `axis`): every kernel template of both targets
    "thread": (8, 7, 1),
    "group": (8, 300, 1),
    "columns": (300, 8, 0),
    "leading": (7, 8, 0),
    "long": (8, 1500, 1),  # the texture target's two-pass reduction
    "long-columns": (1500, 8, 0),
}


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=list(GEOMETRIES))
@pytest.mark.parametrize("split", [False, True], ids=["whole", "chunked"])
def test_sum_and_mean_overflow_only_where_the_exact_sum_does(gl, monkeypatch, geometry, split):
    if split:  # every long reduction cut into many chunks (compute) or parts (texture)
        monkeypatch.setattr(kernels_reduce, "CHUNK_ITERS", 2)
        monkeypatch.setattr(texture, "SPLIT", 8)
    a, b, axis = GEOMETRIES[geometry]
    n = (a, b)[axis]
    rows = np.stack(_rows(n)).astype(F32)  # [8, n]
    x = rows.T.copy() if axis == 0 else rows
    model = dlc.compile(f"input x: [{a}, {b}]\ns = sum(x, axis={axis})\nm = mean(x, axis={axis})\n")
    with np.errstate(all="ignore"):
        gl_out = dlc.Session(model, backend="gl").eval(["s", "m"], {"x": x})
        ref = dlc.Session(model, backend="numpy").eval(["s", "m"], {"x": x})
    _check_sums(gl_out["s"], rows, f"sum over {geometry}")
    _check_sums(gl_out["m"] * F32(n), rows, f"mean over {geometry} (times n)")
    # Where NumPy's float32 sum stays finite, GL's does too (NumPy's order may overflow where the
    # exact sum does not: GL then gives the finite sum).
    for name in ("s", "m"):
        finite = np.isfinite(ref[name])
        assert np.isfinite(gl_out[name][finite]).all(), (name, ref[name], gl_out[name])
    if geometry == "columns":  # the case: NumPy sums down the rows in order, to 0
        assert ref["m"][0] == 0.0 and abs(gl_out["m"][0]) < 1e34


def test_sums_over_many_short_rows_overflow_only_where_the_exact_sum_does(gl):
    # 160 rows of 40: a run of lanes a row (kernels_reduce_rows), every row's case 20 times
    rows = np.tile(np.stack(_rows(40)), (20, 1)).astype(F32)
    model = dlc.compile("input x: [160, 40]\ns = sum(x, axis=1)\nm = mean(x, axis=1)\n")
    with np.errstate(all="ignore"):
        gl_out = dlc.Session(model, backend="gl").eval(["s", "m"], {"x": rows})
    _check_sums(gl_out["s"], rows, "sum over rows")
    _check_sums(gl_out["m"] * F32(40), rows, "mean over rows (times n)")


# -- subnormal floats ------------------------------------------------------------------------


def test_log_and_pow_of_subnormals_match_numpy(backend):
    x = np.array([1.4e-45, 1e-40, 5e-39, 1e-38, TINY, 1.0, -1e-40, 0.0, -0.0], F32)
    got, want = run_op(backend, "log", x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-7, err_msg="log")
    base = np.array([1e-38, 1e-40, 1.4e-45, 1e-40, -1e-40, -1e-40, 1e-40, 1e-39, 0.0], F32)
    power = np.array([-1.0, -0.5, 0.25, 3.0, -1.0, 0.5, 0.0, 1.0, -1.0], F32)
    got, want = run_op(backend, "pow", base, power)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    normal = ~np.isnan(want) & ((np.abs(want) >= TINY) | np.isinf(want))  # a subnormal power may be flushed
    np.testing.assert_allclose(got[normal], want[normal], rtol=1e-5, err_msg="pow")


def test_log_of_a_subnormal_in_a_model():
    model = dlc.compile("input x: [2]\ny = log(x)\n")
    x = np.array([1.4e-45, 1e-38], F32)
    for backend in ("gl", "numpy"):
        got = dlc.Session(model, backend=backend).eval("y", {"x": x})
        np.testing.assert_allclose(got, [-103.27893, -87.49824], rtol=1e-6, err_msg=backend)


def test_the_probe_says_what_kernels_do(backend):
    found = subnormals.of()
    kept = found.compute if backend.target == "compute" else found.fragment
    got, _ = run_op(backend, "mul", np.array([1e-40, TINY], F32), np.array([1.0, 0.5], F32))
    assert (got == (np.array([1e-40, TINY / 2], F32) if kept else 0.0)).all(), (found, backend.target, got)
    assert subnormals.of() is found  # kept on the device: probed once
    assert f"subnormal floats: {found.describe()}" in describe()  # what dlc info prints
