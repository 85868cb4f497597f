"""NaN on GL: debug mode finds a NaN that a later op of the same fused kernel hides, and
log_softmax stays exact at large logits.

Debug-mode kernels flag NaN per IR node (compiler/codegen/glsl.py `flag_nan`, read back by
dlc/debug.py), so `where(x > 0, sqrt(x), 0)` stops at the sqrt although the kernel's output
holds no NaN. Each case first checks that the output really hides the NaN (debug mode off), so
the test fails if the flags stop working.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dlc
from dlc import debug

pytestmark = pytest.mark.gl


@pytest.fixture
def debugging():
    debug.reset()
    dlc.set_debug(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
    dlc.set_debug(False)
    debug.reset()


# (model, the op that makes the NaN, the text at its location, what hides it)
HIDDEN = [
    ("input x: [N]\nout = where(x > 0, sqrt(x), 0)\n", "sqrt", "sqrt(x)", "elementwise"),
    ("input x: [N]\nout = sqrt(x) * 0 + 1\n", "sqrt", "sqrt(x)", "elementwise, x * 0"),
    ("input x: [N]\nout = sqrt(x) > 9\n", "sqrt", "sqrt(x)", "NaN > 9 is false"),
    ("input x: [N]\nout = sum(where(x > 0, log(x), 0))\n", "log", "log(x)", "reduce prologue"),
    (
        "input x: [N, 3]\ninput w: [3, 2]\nout = where(x @ w > 1e6, log(x @ w), 1)\n",
        "log",
        "log(x @ w)",
        "matmul epilogue",
    ),
]


def feeds_for(src: str, n: int, bad: bool) -> dict:
    x = np.linspace(1.0, 2.0, n * (3 if "[N, 3]" in src else 1), dtype=np.float32)
    if "[N, 3]" in src:
        x = x.reshape(n, 3)
    if bad:
        x.reshape(-1)[1] = -100.0
    out = {"x": x}
    if "input w" in src:
        out["w"] = np.array([[1, 2], [0.5, 2], [0.25, 1]], np.float32)
    return out


@pytest.mark.parametrize("n", [8, 7], ids=["vec4", "odd"])
@pytest.mark.parametrize("src, op, text, what", HIDDEN, ids=[h[3] for h in HIDDEN])
def test_debug_mode_finds_a_nan_a_later_op_hides(gl, debugging, src, op, text, what, n):
    dlc.set_debug(False)
    quiet = dlc.Session(dlc.compile(src), backend="gl").eval("out", feeds_for(src, n, True))
    assert not np.isnan(quiet).any(), "the case no longer hides its NaN"
    dlc.set_debug(True)
    sess = dlc.Session(dlc.compile(src), backend="gl")
    with pytest.raises(debug.NaNFound) as e:
        sess.eval("out", feeds_for(src, n, True))
    assert e.value.op == op
    line = src.splitlines()[-1]
    assert e.value.loc is not None and e.value.loc.line == len(src.splitlines())
    assert line[e.value.loc.column - 1 :].startswith(text)
    assert "already held NaN" not in str(e.value)
    # The flags are cleared for the next run: a clean input runs, with the right values.
    ref = dlc.Session(dlc.compile(src), backend="numpy").eval("out", feeds_for(src, n, False))
    got = sess.eval("out", feeds_for(src, n, False))
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_debug_mode_says_when_the_nan_came_in(gl, debugging):
    src = "input x: [N]\nout = where(x > 0, x * 2, 0)\n"
    sess = dlc.Session(dlc.compile(src), backend="gl")
    with pytest.raises(debug.NaNFound, match="already held NaN") as e:
        sess.eval("out", {"x": np.array([1, np.nan, 3], np.float32)})
    assert e.value.op == "mul"


def test_nan_checks_only_in_debug_mode(gl, debugging):
    """Debug mode compiles its own programs with the checks; outside it kernels carry none."""
    from dlc.compiler.pipeline import compile_program

    graph = dlc.compile("input x: [N]\nout = where(x > 0, sqrt(x), 0)\n").graph
    roots = [graph.names["out"]]
    plain = compile_program(graph, roots, ref_dims={"N": 4})
    checked = compile_program(graph, roots, ref_dims={"N": 4}, options={"nan_flags": True})
    assert not any("dlc_nan" in s for s in plain.sources.values())
    assert all(not k.nan_flags for k in plain.spec.kernels)
    assert any("dlc_nan.f[" in s for s in checked.sources.values())
    flagged = {graph.nodes[n].op for k in checked.spec.kernels for n in k.nan_flags}
    assert {"sqrt", "where", "gt"} <= flagged


def test_log_softmax_exact_at_large_logits_on_gl(gl):
    x = np.array([[10000, 10001, 10002, 10003]], np.float32)
    got = dlc.Session(dlc.compile("input x: [B, 4]\nout = log_softmax(x)\n"), backend="gl").eval("out", {"x": x})
    # float64 closed form: j - 3 - log(1 + e^-1 + e^-2 + e^-3)
    want = np.arange(4.0) - 3.0 - np.log1p(np.exp(-1.0) + np.exp(-2.0) + np.exp(-3.0))
    np.testing.assert_allclose(got[0], want, rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.round(got[0], 5), [-3.44019, -2.44019, -1.44019, -0.44019])


def test_division_by_huge_numbers_on_gl(gl):
    """Divisors past 2^126: a driver dividing as a * (1 / b) flushes the subnormal 1 / b to 0
    (the H100 gave inf / 3.4e38 = NaN and 3e38 / 3.4e38 = 0)."""
    a = np.array([np.inf, -np.inf, 3e38, -1.5e38, 1.0, 0.0, -0.0], np.float32)
    b = np.full(7, 3.4e38, np.float32)
    sess = dlc.Session(dlc.compile("input a: [N]\ninput b: [N]\nq = a / b\nr = a / -b\n"), backend="gl")
    got = sess.eval(["q", "r"], {"a": a, "b": b})
    for name, want in (("q", a / b), ("r", a / -b)):
        normal = np.abs(want) >= np.finfo(np.float32).tiny  # a subnormal quotient may be flushed
        np.testing.assert_allclose(got[name][normal], want[normal], rtol=1e-6, err_msg=name)
        assert np.all(np.signbit(got[name]) == np.signbit(want)), name
