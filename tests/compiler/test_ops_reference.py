"""Every built-in function of the language, run on the NumPy reference backend,
against an independent NumPy (or closed-form) computation of the same thing."""

from __future__ import annotations

import numpy as np
import pytest
from special_values import AND_CASES, MOD_CASES, ROUND_CASES, SPECIALS, pow_inputs, same_specials

import dlc
from dlc.compiler import registry
from dlc.compiler.registry import FUNCTIONS

rng = np.random.default_rng(0)


def run(src: str, fetch: str = "out", **feeds):
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    return sess.eval(fetch, feeds)


def arr(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _lse(x, axis=-1, keepdims=False):
    m = x.max(axis=axis, keepdims=True)
    out = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _entries(arity: int) -> list[registry.OpDef]:
    """The elementwise functions of the language with a closed-form oracle, by arity."""
    return [
        op
        for op in registry.REGISTRY.values()
        if op.kind == "elementwise" and op.arity == arity and op.params and op.oracle and op.oracle.numpy
    ]


def _call(op: registry.OpDef, args: str, kwargs) -> str:
    return f"{op.name}({args}{''.join(f', {k}={_lit(v)}' for k, v in kwargs.items())})"


def _lit(v) -> str:
    return f'"{v}"' if isinstance(v, str) else repr(v)


# (entry, keyword set) for every elementwise function: the sweep is over the registry.
UNARY_CALLS = [
    pytest.param(op, kw, id=f"{op.name}-{k}") for op in _entries(1) for k, kw in enumerate(op.oracle.call_sets())
]
BINARY_CALLS = [pytest.param(op, id=op.name) for op in _entries(2)]


@pytest.mark.parametrize("op, kw", UNARY_CALLS)
def test_unary(op, kw):
    x = registry.sample(op.oracle.domains(1)[0], rng, (3, 5)).astype(np.float32)
    got = run(f"input x: [B, 5]\nout = {_call(op, 'x', kw)}\n", x=x)
    with np.errstate(all="ignore"):
        want = op.oracle.numpy(x.astype(np.float64), **kw)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", BINARY_CALLS)
def test_binary_functions_of_the_registry(op):
    da, db = op.oracle.domains(2)
    a, b = registry.sample(da, rng, (2, 3)).astype(np.float32), registry.sample(db, rng, (3,)).astype(np.float32)
    got = run(f"input a: [2, 3]\ninput b: [3]\nout = {op.name}(a, b)\n", a=a, b=b)
    with np.errstate(all="ignore"):
        want = op.oracle.numpy(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_parameterized_unary():
    x = arr(4, 6, low=-3, high=3)
    x64 = x.astype(np.float64)
    got = run("input x: [B, 6]\nout = leaky_relu(x, alpha=0.1)\n", x=x)
    np.testing.assert_allclose(got, np.where(x64 >= 0, x64, 0.1 * x64), rtol=1e-6)
    got = run("input x: [B, 6]\nout = leaky_relu(x)\n", x=x)  # default alpha 0.2
    np.testing.assert_allclose(got, np.where(x64 >= 0, x64, 0.2 * x64), rtol=1e-6)
    got = run("input x: [B, 6]\nout = elu(x, 0.5)\n", x=x)
    np.testing.assert_allclose(got, np.where(x64 >= 0, x64, 0.5 * (np.exp(x64) - 1)), rtol=1e-5, atol=1e-7)
    got = run("input x: [B, 6]\nout = clip(x, -1, 0.5)\n", x=x)
    np.testing.assert_allclose(got, np.clip(x, -1, 0.5))


def test_sigmoid_softplus_extremes_are_finite():
    x = np.array([-100.0, -30.0, 0.0, 30.0, 100.0], np.float32)
    sig = run("input x: [N]\nout = sigmoid(x)\n", x=x)
    assert np.all(np.isfinite(sig)) and sig[-1] == 1
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5, atol=1e-30)
    sp = run("input x: [N]\nout = softplus(x)\n", x=x)
    np.testing.assert_allclose(sp, np.log1p(np.exp(x.astype(np.float64))), rtol=1e-6, atol=1e-30)


BINARY = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "==": lambda a, b: (a == b).astype(float),
    "!=": lambda a, b: (a != b).astype(float),
    "<": lambda a, b: (a < b).astype(float),
    "<=": lambda a, b: (a <= b).astype(float),
    ">": lambda a, b: (a > b).astype(float),
    ">=": lambda a, b: (a >= b).astype(float),
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1))])
def test_binary_operators_broadcast(op, shapes):
    sa, sb = shapes
    a = np.round(arr(*sa)).astype(np.float32)  # rounding makes == and != meaningful
    b = np.round(arr(*sb)).astype(np.float32) + (0.5 if op == "/" else 0)
    src = f"input a: {list(sa)}\ninput b: {list(sb)}\nout = a {op} b\n"
    np.testing.assert_allclose(run(src, a=a, b=b), BINARY[op](a, b), rtol=1e-6)


@pytest.mark.parametrize("fn, oracle", [("maximum", np.maximum), ("minimum", np.minimum), ("pow", np.power)])
def test_binary_functions(fn, oracle):
    a, b = arr(2, 3, low=0.1, high=3), arr(3)
    np.testing.assert_allclose(
        run(f"input a: [2, 3]\ninput b: [3]\nout = {fn}(a, b)\n", a=a, b=b), oracle(a, b), rtol=1e-5
    )


def test_power_operator_is_right_associative_and_handles_negative_bases():
    x = np.array([-2.0, -1.5, 0.0, 3.0], np.float32)
    np.testing.assert_allclose(run("input x: [N]\nout = x ^ 2\n", x=x), x**2)
    np.testing.assert_allclose(run("input x: [N]\nout = x ^ 3\n", x=x), x**3)
    np.testing.assert_allclose(run("input x: [N]\nout = 2 ^ 3 ^ 2 + 0 * x\n", x=x), [512.0] * 4)
    np.testing.assert_allclose(run("input x: [N]\nout = -x ^ 2\n", x=x), -(x**2))


def test_where():
    c = np.array([[1, 0, 1]], np.float32)
    a, b = arr(2, 3), arr(2, 1)
    got = run("input c: [1, 3]\ninput a: [2, 3]\ninput b: [2, 1]\nout = where(c, a, b)\n", c=c, a=a, b=b)
    np.testing.assert_allclose(got, np.where(c != 0, a, b))


MATMUL_SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((1, 3, 4), (2, 4, 5)),
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
def test_matmul_numpy_semantics(sa, sb):
    a, b = arr(*sa), arr(*sb)
    src = f"input a: {list(sa)}\ninput b: {list(sb)}\nout = a @ b\nout2 = matmul(a, b)\n"
    np.testing.assert_allclose(run(src, a=a, b=b), np.matmul(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(src, "out2", a=a, b=b), np.matmul(a, b), rtol=1e-5, atol=1e-6)


def test_matmul_with_symbolic_batch():
    x, w = arr(7, 4), arr(4, 3)
    got = run("input x: [B, 4]\ninput w: [4, 3]\nout = x @ w\n", x=x, w=w)
    np.testing.assert_allclose(got, x @ w, rtol=1e-5)


def test_transpose():
    x = arr(2, 3, 4)
    np.testing.assert_allclose(run("input x: [2, 3, 4]\nout = transpose(x)\n", x=x), x.T)
    np.testing.assert_allclose(
        run("input x: [2, 3, 4]\nout = transpose(x, [1, 0, 2])\n", x=x), np.transpose(x, (1, 0, 2))
    )


@pytest.mark.parametrize("fn", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize(
    "axis, keepdims", [(None, False), (0, False), (-1, True), ((0, 2), False), ([-1, 0], True), (1, True)]
)
def test_reductions(fn, axis, keepdims):
    x = arr(3, 4, 5)
    args = ""
    if axis is not None:
        args += f", axis={list(axis) if isinstance(axis, (list, tuple)) else axis}"
    if keepdims:
        args += ", keepdims=true"
    got = run(f"input x: [B, 4, 5]\nout = {fn}(x{args})\n", x=x)
    ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    want = getattr(np, fn)(x.astype(np.float64), axis=ax, keepdims=keepdims)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.shape == want.shape


def test_mean_over_symbolic_dim_uses_the_bound_size():
    for n in (3, 10):
        x = arr(n, 2)
        np.testing.assert_allclose(run("input x: [B, 2]\nout = mean(x)\n", x=x), x.mean(), rtol=1e-6)


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
def test_arg_reductions(fn):
    x = arr(4, 6)
    np.testing.assert_array_equal(run(f"input x: [B, 6]\nout = {fn}(x)\n", x=x), getattr(np, fn)(x, axis=-1))
    np.testing.assert_array_equal(run(f"input x: [B, 6]\nout = {fn}(x, axis=0)\n", x=x), getattr(np, fn)(x, axis=0))


def test_logsumexp_softmax_log_softmax():
    x = arr(3, 5, low=-50, high=50)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(run("input x: [B, 5]\nout = logsumexp(x)\n", x=x), _lse(x64), rtol=1e-6)
    np.testing.assert_allclose(
        run("input x: [B, 5]\nout = logsumexp(x, axis=0, keepdims=true)\n", x=x), _lse(x64, 0, True), rtol=1e-6
    )
    np.testing.assert_allclose(run("input x: [B, 5]\nout = softmax(x)\n", x=x), _softmax(x64), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        run("input x: [B, 5]\nout = softmax(x, axis=0)\n", x=x), _softmax(x64, 0), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        run("input x: [B, 5]\nout = log_softmax(x)\n", x=x), x64 - _lse(x64, -1, True), rtol=1e-5, atol=1e-5
    )


def test_reshape_with_minus_one_and_symbolic_dims():
    x = arr(3, 4, 2)
    got = run("input x: [B, 4, 2]\nout = reshape(x, [B, -1])\n", x=x)
    np.testing.assert_allclose(got, x.reshape(3, 8))
    got = run("input x: [B, 4, 2]\nout = reshape(x, [-1, 2, 4])\n", x=x)
    np.testing.assert_allclose(got, x.reshape(3, 2, 4))
    m = dlc.compile("input x: [B, 4, 2]\nout = reshape(x, [B, -1])\n")
    assert m.tensors["out"] == ("B", 8)


def test_concat_slice_one_hot():
    a, b = arr(2, 3), arr(2, 2)
    got = run("input a: [2, 3]\ninput b: [2, 2]\nout = concat([a, b], axis=1)\n", a=a, b=b)
    np.testing.assert_allclose(got, np.concatenate([a, b], axis=1))
    got = run("input a: [2, 2]\ninput b: [2, 2]\nout = concat([a, transpose(b)], axis=-2)\n", a=a[:, :2], b=b)
    np.testing.assert_allclose(got, np.concatenate([a[:, :2], b.T], axis=0))
    x = arr(4, 5)
    np.testing.assert_allclose(run("input x: [4, 5]\nout = slice(x, [1, 2], [2, -1])\n", x=x), x[1:3, 2:])
    np.testing.assert_allclose(run("input x: [B, 5]\nout = slice(x, [0, 1], [-1, 3])\n", x=x), x[:, 1:4])
    idx = np.array([0, 3, 1], np.float32)
    np.testing.assert_array_equal(run("input i: [B]\nout = one_hot(i, 4)\n", i=idx), np.eye(4)[[0, 3, 1]])


def _conv_oracle(x, w, stride, padding):
    """Direct loops, TensorFlow's padding rule."""
    b, h, wd, _ = x.shape
    kh, kw, _, co = w.shape
    if padding == "same":
        oh, ow = -(-h // stride), -(-wd // stride)
        pt = max((oh - 1) * stride + kh - h, 0) // 2
        pl = max((ow - 1) * stride + kw - wd, 0) // 2
    else:
        oh, ow, pt, pl = (h - kh) // stride + 1, (wd - kw) // stride + 1, 0, 0
    out = np.zeros((b, oh, ow, co))
    for i in range(oh):
        for j in range(ow):
            for di in range(kh):
                for dj in range(kw):
                    r, c = i * stride + di - pt, j * stride + dj - pl
                    if 0 <= r < h and 0 <= c < wd:
                        out[:, i, j, :] += x[:, r, c, :] @ w[di, dj]
    return out


@pytest.mark.parametrize("stride, padding", [(1, "same"), (2, "same"), (1, "valid"), (2, "valid")])
def test_conv2d(stride, padding):
    x, w = arr(2, 7, 6, 3), arr(3, 2, 3, 4)
    got = run(
        f'input x: [B, 7, 6, 3]\ninput w: [3, 2, 3, 4]\nout = conv2d(x, w, stride={stride}, padding="{padding}")\n',
        x=x,
        w=w,
    )
    np.testing.assert_allclose(got, _conv_oracle(x, w, stride, padding), rtol=1e-4, atol=1e-5)


def _pool_oracle(x, k, s, padding, reduce):
    b, h, w, c = x.shape
    if padding == "same":
        oh, ow = -(-h // s), -(-w // s)
        pt, pl = max((oh - 1) * s + k - h, 0) // 2, max((ow - 1) * s + k - w, 0) // 2
    else:
        oh, ow, pt, pl = (h - k) // s + 1, (w - k) // s + 1, 0, 0
    out = np.zeros((b, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * s - pt, j * s - pl
            win = x[:, max(r0, 0) : r0 + k, max(c0, 0) : c0 + k, :]
            out[:, i, j, :] = reduce(win, axis=(1, 2))
    return out


@pytest.mark.parametrize("fn, reduce", [("max_pool", np.max), ("avg_pool", np.mean)])
@pytest.mark.parametrize("k, s, padding", [(2, 2, "valid"), (3, 2, "same"), (3, 1, "valid")])
def test_pools(fn, reduce, k, s, padding):
    x = arr(2, 7, 5, 3)
    got = run(f'input x: [B, 7, 5, 3]\nout = {fn}(x, {k}, stride={s}, padding="{padding}")\n', x=x)
    np.testing.assert_allclose(got, _pool_oracle(x, k, s, padding, reduce), rtol=1e-5, atol=1e-6)


def _axis(n, k, s, d, padding, which):
    """(outputs, leading pad) of one axis, computed directly: TensorFlow's "same", or explicit."""
    span = (k - 1) * d + 1
    if padding == "same":
        out = -(-n // s)
        return out, max((out - 1) * s + span - n, 0) // 2
    lo, hi = (0, 0) if padding == "valid" else padding[2 * which : 2 * which + 2]
    return (n + lo + hi - span) // s + 1, lo


def _conv_options_oracle(x, w, stride, padding, dilation, groups):
    """Direct loops over outputs, taps and groups."""
    b, h, wd, cin = x.shape
    kh, kw, ig, co = w.shape
    og = co // groups
    oh, pt = _axis(h, kh, stride[0], dilation[0], padding, 0)
    ow, pl = _axis(wd, kw, stride[1], dilation[1], padding, 1)
    out = np.zeros((b, oh, ow, co))
    for i in range(oh):
        for j in range(ow):
            for di in range(kh):
                for dj in range(kw):
                    r = i * stride[0] + di * dilation[0] - pt
                    c = j * stride[1] + dj * dilation[1] - pl
                    if not (0 <= r < h and 0 <= c < wd):
                        continue
                    for g in range(groups):
                        out[:, i, j, g * og : (g + 1) * og] += (
                            x[:, r, c, g * ig : (g + 1) * ig] @ w[di, dj, :, g * og : (g + 1) * og]
                        )
    return out


@pytest.mark.parametrize(
    "xs, ws, args, stride, padding, dilation, groups",
    [
        ((2, 7, 6, 3), (3, 2, 3, 4), "stride=[2, 1], dilation=[1, 2]", (2, 1), "same", (1, 2), 1),
        ((2, 7, 6, 3), (3, 3, 3, 4), 'padding="valid", dilation=2', (1, 1), "valid", (2, 2), 1),
        ((1, 6, 7, 3), (2, 3, 3, 5), "stride=2, padding=[1, 0, 2, 1]", (2, 2), (1, 0, 2, 1), (1, 1), 1),
        ((2, 5, 6, 6), (3, 3, 2, 9), "groups=3", (1, 1), "same", (1, 1), 3),
        ((2, 5, 6, 4), (3, 3, 1, 8), "groups=4, stride=[1, 2], padding=[1, 1, 0, 2]", (1, 2), (1, 1, 0, 2), (1, 1), 4),
    ],
)
def test_conv2d_options(xs, ws, args, stride, padding, dilation, groups):
    x, w = arr(*xs), arr(*ws)
    src = f"input x: [B, {xs[1]}, {xs[2]}, {xs[3]}]\ninput w: {list(ws)}\nout = conv2d(x, w, {args})\n"
    np.testing.assert_allclose(
        run(src, x=x, w=w), _conv_options_oracle(x, w, stride, padding, dilation, groups), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("fn, include", [("max_pool", False), ("avg_pool", False), ("avg_pool", True)])
def test_pools_with_explicit_padding(fn, include):
    x = arr(2, 7, 5, 3)
    pads = (1, 0, 2, 1)  # top, bottom, left, right
    extra = ", count_include_pad=true" if include else ""
    got = run(f"input x: [B, 7, 5, 3]\nout = {fn}(x, [3, 3], stride=[2, 1], padding={list(pads)}{extra})\n", x=x)
    fill = -np.inf if fn == "max_pool" else np.nan  # nan marks a padded position
    xp = np.pad(x.astype(np.float64), ((0, 0), pads[:2], pads[2:], (0, 0)), constant_values=fill)
    oh, ow = (7 + 1 - 3) // 2 + 1, (5 + 3 - 3) // 1 + 1
    want = np.zeros((2, oh, ow, 3))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, 2 * i : 2 * i + 3, j : j + 3, :]
            if fn == "max_pool":
                want[:, i, j] = win.max(axis=(1, 2))
            elif include:
                want[:, i, j] = np.nansum(win, axis=(1, 2)) / 9
            else:
                want[:, i, j] = np.nanmean(win, axis=(1, 2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_global_pools():
    x = arr(3, 5, 7, 4)
    src = "input x: [B, 5, 7, 4]\na = global_avg_pool(x)\nm = global_max_pool(x)\n"
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    np.testing.assert_allclose(sess.eval("a", {"x": x}), x.mean(axis=(1, 2)), rtol=1e-5)
    np.testing.assert_array_equal(sess.eval("m", {"x": x}), x.max(axis=(1, 2)))
    assert dlc.compile(src).tensors["a"] == ("B", 4)


def test_costs():
    p, t = arr(5, 3), arr(5, 3)
    np.testing.assert_allclose(
        run("input p: [B, 3]\ninput t: [B, 3]\nout = mean_squared(p, t)\n", p=p, t=t), np.mean((p - t) ** 2), rtol=1e-6
    )
    logits = arr(5, 4, low=-10, high=10)
    labels = np.eye(4, dtype=np.float32)[[0, 1, 3, 2, 1]]
    lsm = logits - _lse(logits.astype(np.float64), -1, True)
    np.testing.assert_allclose(
        run("input l: [B, 4]\ninput y: [B, 4]\nout = softmax_cross_entropy(l, y)\n", l=logits, y=labels),
        np.mean(-np.sum(labels * lsm, axis=-1)),
        rtol=1e-5,
    )
    z = (arr(5, 3) > 0).astype(np.float32)
    x = arr(5, 3, low=-20, high=20).astype(np.float64)
    sig = 1 / (1 + np.exp(-x))
    want = np.mean(-(z * np.log(sig) + (1 - z) * np.log(1 - sig)))
    np.testing.assert_allclose(
        run("input x: [B, 3]\ninput z: [B, 3]\nout = sigmoid_cross_entropy(x, z)\n", x=x.astype(np.float32), z=z),
        want,
        rtol=1e-4,
    )


def test_consts_and_literals():
    got = run(
        "const k: [2, 2] = [[1, 2], [3, 4]]\nconst h: [3] = 0.5\ninput x: [2]\nout = k @ x + sum(h)\n",
        x=np.array([1.0, -1.0], np.float32),
    )
    np.testing.assert_allclose(got, np.array([[1, 2], [3, 4]]) @ [1, -1] + 1.5)
    got = run("input x: [2]\nout = x * [10, -10]\n", x=np.array([1.0, 2.0], np.float32))
    np.testing.assert_allclose(got, [10, -20])


def test_float64_reference_on_request():
    from dlc.compiler.reference import evaluate

    g = dlc.compile("input x: [N]\nout = x / 3\n").graph
    v = evaluate(g, [g.names["out"]], {"x": np.array([1.0])}, {"N": 1}, dtype=np.float64)
    assert v[g.names["out"]].dtype == np.float64 and v[g.names["out"]][0] == 1.0 / 3.0


COVERED = {op.name for op in _entries(1) + _entries(2)} | {
    "clip",
    "where",
    "matmul",
    "transpose",
    "sum",
    "mean",
    "max",
    "min",
    "argmax",
    "argmin",
    "logsumexp",
    "softmax",
    "log_softmax",
    "reshape",
    "concat",
    "slice",
    "one_hot",
    "conv2d",
    "max_pool",
    "avg_pool",
    "global_avg_pool",
    "global_max_pool",
    "mean_squared",
    "softmax_cross_entropy",
    "sigmoid_cross_entropy",
    "pad",
    "broadcast_to",
    "gather",  # and the i32 paths of one_hot and softmax_cross_entropy: test_integers.py
    # against PyTorch in tests/compiler/test_heads.py
    *("ones", "zeros", "full", "arange", "tril", "triu", "split", "stack", "layer_norm", "rms_norm"),
    # tests/compiler/test_state_random.py
    "batch_norm",
    "dropout",
    "random_uniform",
    "random_normal",
    "attention",  # against PyTorch's SDPA in tests/compiler/test_attention.py
}


def test_pad_and_broadcast_to():
    x = arr(2, 3)
    got = run("input x: [B, 3]\nout = pad(x, [0, 1], [0, 2])\n", x=x)
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (1, 2)]))
    got = run("input x: [B, 3]\nout = broadcast_to(x, [4, B, 3])\n", x=x)
    np.testing.assert_array_equal(got, np.broadcast_to(x, (4, 2, 3)))
    with pytest.raises(dlc.CompileError, match="pad along symbolic dim B"):
        dlc.compile("input x: [B, 3]\nout = pad(x, [1, 0], [0, 0])\n")
    with pytest.raises(dlc.CompileError, match=r"cannot broadcast \[B, 3\] to \[B, 4\]"):
        dlc.compile("input x: [B, 3]\nout = broadcast_to(x, [B, 4])\n")


def test_erf_and_gelu():
    import math

    x = np.concatenate([np.linspace(-4, 4, 41), [1e-7, -1e-4]]).astype(np.float32)
    erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(run("input x: [B]\nout = erf(x)\n", x=x), erf, rtol=1e-6, atol=1e-7)
    erf2 = np.array([math.erf(v / math.sqrt(2)) for v in x.astype(np.float64)])
    np.testing.assert_allclose(run("input x: [B]\nout = gelu(x)\n", x=x), x * (1 + erf2) / 2, rtol=1e-6, atol=1e-7)
    tanh = x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3))) / 2
    np.testing.assert_allclose(
        run('input x: [B]\nout = gelu(x, approximate="tanh")\n', x=x), tanh, rtol=1e-5, atol=1e-7
    )
    with pytest.raises(dlc.CompileError, match='gelu approximate must be "none" or "tanh"'):
        dlc.compile('input x: [B]\nout = gelu(x, approximate="fast")\n')


def test_every_function_of_the_language_is_covered_here():
    assert set(FUNCTIONS) - COVERED == set()


# -- NaN, infinities and signed zeros ---------------------------------------------------------

MILD_SPECIALS = SPECIALS[(np.abs(SPECIALS) < 1e6) | ~np.isfinite(SPECIALS)]  # no 1e30: oracles


@pytest.mark.parametrize("op, kw", UNARY_CALLS)
def test_unary_special_values(op, kw):
    """NaN propagates, infinities and signed zeros come out as NumPy makes them."""
    x = MILD_SPECIALS
    got = run(f"input x: [N]\nout = {_call(op, 'x', kw)}\n", x=x)
    with np.errstate(all="ignore"):
        want = np.asarray(op.oracle.numpy(x.astype(np.float64), **kw)).astype(np.float32)
    same_specials(got, want, op.name, rtol=2e-6)


SPECIAL_OPERATORS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}
SPECIAL_BINARY = [pytest.param(op.name, op.oracle.numpy, id=op.name) for op in _entries(2)] + [
    pytest.param(sym, fn, id=sym) for sym, fn in SPECIAL_OPERATORS.items()
]


@pytest.mark.parametrize("op, oracle", SPECIAL_BINARY)
def test_binary_special_values(op, oracle):
    """Every special value against every other: comparisons with NaN are false but !=."""
    a, b = MILD_SPECIALS.reshape(-1, 1), MILD_SPECIALS.reshape(1, -1)
    call = f"{op}(a, b)" if op.isidentifier() else f"a {op} b"
    got = run(f"input a: [N, 1]\ninput b: [1, M]\nout = {call}\n", a=a, b=b)
    with np.errstate(all="ignore"):
        want = np.asarray(oracle(a.astype(np.float64), b.astype(np.float64))).astype(np.float32)
    same_specials(got, want, op)


def test_clip_and_where_with_nan():
    x = MILD_SPECIALS
    got = run("input x: [N]\nout = clip(x, -1, 2)\n", x=x)
    same_specials(got, np.clip(x, -1, 2), "clip")
    got = run("input x: [N]\nout = where(x, 1, 2)\n", x=x)  # NaN is not zero: true
    same_specials(got, np.where(x != 0, 1.0, 2.0).astype(np.float32), "where")


def test_pow_edge_cases_match_c99():
    x, y, want = pow_inputs()
    got = run("input x: [N]\ninput y: [N]\nout = pow(x, y)\n", x=x, y=y)
    for xi, yi, g, w in zip(x, y, got, want):
        same_specials(np.array([g]), np.array([w]), f"pow({xi}, {yi})", rtol=1e-6)


@pytest.mark.parametrize("fn", ["max", "min", "argmax", "argmin", "sum"])
def test_reductions_with_nan(fn):
    """max/min propagate NaN; argmax/argmin give the first NaN's index, as NumPy's do."""
    x = np.array([[1, np.nan, 3, np.nan], [-np.inf, -np.inf, -np.inf, -np.inf], [2, 5, np.inf, -1]], np.float32)
    got = run(
        f"input x: [B, 4]\nout = {fn}(x, 1)\n" if fn.startswith("arg") else f"input x: [B, 4]\nout = {fn}(x, axis=1)\n",
        x=x,
    )
    with np.errstate(all="ignore"):
        want = getattr(np, fn)(x, axis=1).astype(np.float32)
    same_specials(got, want, fn, zero_signs=False)


def test_log_softmax_is_exact_at_large_logits():
    """(x - m) - log(sum(exp(x - m))) against the float64 closed form: the float32 result
    rounds to -3.44019, -2.44019, -1.44019, -0.44019."""
    x = np.array([[10000, 10001, 10002, 10003], [0.0, 1.0, 2.0, 3.0]], np.float32)
    got = run("input x: [B, 4]\nout = log_softmax(x)\n", x=x)
    want = np.array([0.0, 1.0, 2.0, 3.0]) - 3.0 - np.log1p(np.exp(-1.0) + np.exp(-2.0) + np.exp(-3.0))
    np.testing.assert_allclose(got, np.stack([want, want]), rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.round(got[0], 5), [-3.44019, -2.44019, -1.44019, -0.44019])
    labels = np.array([[0, 0, 0, 1], [1, 0, 0, 0]], np.float32)
    cost = run("input x: [B, 4]\ninput y: [B, 4]\nout = softmax_cross_entropy(x, y)\n", x=x, y=labels)
    np.testing.assert_allclose(cost, -(want[3] + want[0]) / 2, rtol=1e-6)


def test_mod_takes_the_sign_of_the_divisor_and_round_halves_to_even():
    a, b, want = (np.array(c, np.float32) for c in zip(*MOD_CASES))
    got = run("input a: [N]\ninput b: [N]\nout = mod(a, b)\n", a=a, b=b)
    same_specials(got, want, "mod")
    x, want = (np.array(c, np.float32) for c in zip(*ROUND_CASES))
    same_specials(run("input x: [N]\nout = round(x)\n", x=x), want, "round")
    a, b, want = (np.array(c, np.float32) for c in zip(*AND_CASES))
    same_specials(run("input a: [N]\ninput b: [N]\nout = logical_and(a, b)\n", a=a, b=b), want, "logical_and")
    logic = "input a: [N]\ninput b: [N]\nout = logical_or(a, b) + 2 * logical_not(a)\n"
    np.testing.assert_array_equal(run(logic, a=a, b=b), [2.0, 3.0, 1.0, 1.0, 1.0, 3.0])
