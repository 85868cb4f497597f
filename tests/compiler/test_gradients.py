"""Every differentiable registry op's gradient rule, checked on random inputs.

The sweep is over the registry: a differentiable op with no gradient rule or
no case here fails `test_every_differentiable_op_is_covered`. Elementwise cases and
their PyTorch equivalents come from the entries' oracles (domain, attr sets, torch), so a
new entry is swept with no edit here. Each case builds
`loss = sum(op(x...) * r)` for a fixed random `r`, differentiates it with
`autodiff.differentiate` and compares, in float64, with central differences
and (when importable) with PyTorch's autograd.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from dlc.compiler import registry
from dlc.compiler.autodiff import differentiate
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.gradients import GRADIENTS
from dlc.compiler.ops.window import window_pads
from dlc.compiler.reference import evaluate
from dlc.compiler.shapes import bind
from dlc.compiler.verify import check_graph


@dataclass
class Case:
    op: str
    shapes: list[tuple]
    attrs: dict = field(default_factory=dict)
    # per input: normal, positive, away (|x| >= 0.3), relu6 (away from 0 and 6), cond, two
    domains: list[str] | None = None
    wrt: tuple[int, ...] | None = None  # inputs to check (default: all)
    dims: dict[str, int] = field(default_factory=dict)
    label: str = ""

    @property
    def id(self) -> str:
        shapes = "x".join("[" + ",".join(map(str, s)) + "]" for s in self.shapes)
        return f"{self.op}-{self.label or shapes}"


def sample(rng: np.random.Generator, domain: str, shape: tuple) -> np.ndarray:
    if domain == "cond":
        return (rng.uniform(size=shape) > 0.5).astype(float)
    if domain == "two":
        return np.full(shape, 2.0)
    return registry.sample(domain, rng, shape)  # the domains entries' oracles name


# -- the cases ----------------------------------------------------------------------

RNG = np.random.default_rng(1234)


def rand_shape(rank: int, lo: int = 2, hi: int = 4) -> tuple:
    return tuple(int(d) for d in RNG.integers(lo, hi + 1, size=rank))


def broadcast_partner(shape: tuple) -> tuple:
    """A shape that broadcasts against `shape`: leading axes dropped, some set to 1."""
    drop = int(RNG.integers(0, len(shape) + 1))
    tail = list(shape[drop:])
    for k in range(len(tail)):
        if RNG.uniform() < 0.5:
            tail[k] = 1
    return tuple(tail)


def _elementwise(arity: int) -> list[registry.OpDef]:
    return [
        op
        for op in registry.REGISTRY.values()
        if op.kind == "elementwise" and op.arity == arity and op.differentiable and op.oracle is not None
    ]


def unary_cases() -> list[Case]:
    # every differentiable unary entry, on its oracle's domain and attr sets
    out = []
    for op in _elementwise(1):
        dom = op.oracle.domains(1)
        for k, attrs in enumerate(op.oracle.attrs):
            for rank in (0, 1, 3):
                out.append(Case(op.name, [rand_shape(rank)], dict(attrs), dom, label=f"r{rank}a{k}"))
    return out


def binary_cases() -> list[Case]:
    out = []
    for op in _elementwise(2):
        doms = op.oracle.domains(2)
        full = rand_shape(3)
        for shapes in (
            [full, full],
            [full, broadcast_partner(full)],
            [broadcast_partner(full), full],
            [(), rand_shape(2)],
            [rand_shape(1), ()],
        ):
            out.append(Case(op.name, list(shapes), {}, doms))
        out.append(Case(op.name, [("B", 3), (1, 3)], {}, doms, dims={"B": 2}, label="symbolic"))
    # x^2 with a negative base: the exponent is fixed, only the base is checked
    out.append(Case("pow", [(3, 2), ()], {}, ["normal", "two"], wrt=(0,), label="neg-base"))
    return out


def where_cases() -> list[Case]:
    return [
        Case("where", [(2, 3), (3,), (2, 1)], {}, ["cond", "normal", "normal"], wrt=(1, 2)),
        Case("where", [(4,), (4,), ()], {}, ["cond", "normal", "normal"], wrt=(1, 2)),
    ]


def layout_cases() -> list[Case]:
    return [
        Case("reshape", [(2, 3, 4)], {"shape": (4, 6)}),
        Case("reshape", [("B", 6)], {"shape": ("B", 2, 3)}, dims={"B": 2}, label="symbolic"),
        Case("reshape", [()], {"shape": (1, 1)}, label="scalar"),
        Case("broadcast_to", [(3, 1)], {"shape": (2, 3, 4)}),
        Case("broadcast_to", [()], {"shape": (3,)}, label="scalar"),
        Case("broadcast_to", [("B", 1)], {"shape": ("B", 3)}, dims={"B": 2}, label="symbolic"),
        Case("transpose", [(2, 3, 4)], {"perm": (2, 0, 1)}),
        Case("transpose", [(3, 5)], {"perm": (1, 0)}),
        Case("slice", [(4, 5)], {"begin": (1, 2), "size": (2, 3)}),
        Case("slice", [("B", 5)], {"begin": (0, 1), "size": ("B", 3)}, dims={"B": 3}, label="symbolic"),
        Case("pad", [(2, 3)], {"before": (1, 0), "after": (0, 2)}),
        Case("pad", [("B", 3)], {"before": (0, 1), "after": (0, 1)}, dims={"B": 2}, label="symbolic"),
        Case("concat", [(2, 3), (2, 1), (2, 2)], {"axis": 1}),
        Case("concat", [(1, 3), (2, 3)], {"axis": 0}),
        # i32 indices ("ids", in [0, 3)): the gradient is the table's only
        Case("gather", [(4, 3), (5,)], {"axis": 0}, ["normal", "ids"], wrt=(0,)),
        Case("gather", [(2, 3, 4), ("B", 2)], {"axis": 1}, ["normal", "ids"], wrt=(0,), dims={"B": 3}, label="axis1"),
        Case("gather", [(3, 2), ()], {"axis": 0}, ["normal", "ids"], wrt=(0,), label="scalar-index"),
        Case("pick", [(2, 5, 3), (2, 5)], {}, ["normal", "ids"], wrt=(0,)),
    ]


def reduce_cases() -> list[Case]:
    out = []
    for op in ("sum", "max", "min"):
        s = rand_shape(3)
        out += [
            Case(op, [s], {"axes": (1,), "keepdims": False}, label="ax1"),
            Case(op, [s], {"axes": (0, 2), "keepdims": True}, label="ax02keep"),
            Case(op, [s], {"axes": (0, 1, 2), "keepdims": False}, label="all"),
            Case(op, [("B", 3)], {"axes": (0,), "keepdims": False}, dims={"B": 4}, label="symbolic"),
        ]
    return out


def matmul_cases() -> list[Case]:
    out = []
    m, k, n = 2, 3, 4
    for ta in (False, True):
        for tb in (False, True):
            a = (k, m) if ta else (m, k)
            b = (n, k) if tb else (k, n)
            out.append(Case("matmul", [a, b], {"ta": ta, "tb": tb}, label=f"2x2-{ta:d}{tb:d}"))
            out.append(Case("matmul", [(3, *a), (3, *b)], {"ta": ta, "tb": tb}, label=f"3x3-{ta:d}{tb:d}"))
    f = {"ta": False, "tb": False}
    out += [
        Case("matmul", [(m, k), (2, k, n)], f, label="2x3"),
        Case("matmul", [(2, m, k), (k, n)], f, label="3x2"),
        Case("matmul", [(1, m, k), (3, k, n)], f, label="batch-broadcast"),
        Case("matmul", [("B", k), (k, n)], f, dims={"B": 3}, label="symbolic"),
        Case("matmul", [(2, 1, m, k), (3, k, n)], f, label="rank4-broadcast"),
        Case("matmul", [(2, 1, 3, m, k), (1, 2, 3, k, n)], f, label="rank5-broadcast"),
        Case("matmul", [("B", 2, k, m), (1, 2, n, k)], {"ta": True, "tb": True}, dims={"B": 2}, label="rank4-sym"),
    ]
    return out


def conv_out(x: tuple, k: tuple, attrs: dict) -> tuple:
    return window_pads(x, k, attrs)[:2]


WINDOWS = [((1, 1), "same"), ((2, 2), "valid"), ((2, 1), "same"), ((2, 2), "same")]


def conv_cases(x: tuple, w: tuple, wa: dict, lab: str) -> list[Case]:
    """conv2d and its two gradient ops under one geometry."""
    oh, ow = conv_out(x, w[:2], wa)
    dy = (x[0], oh, ow, w[3])
    return [
        Case("conv2d", [x, w], wa, label=lab),
        Case("conv2d_grad_input", [dy, w], {**wa, "x_shape": x}, label=lab),
        Case("conv2d_grad_filter", [x, dy], {**wa, "w_shape": w}, label=lab),
    ]


def pool_cases(x: tuple, pa: dict, lab: str, ops=("max", "avg")) -> list[Case]:
    oh, ow = conv_out(x, pa["size"], pa)
    dy = (x[0], oh, ow, x[3])
    out = []
    if "max" in ops:
        out += [Case("max_pool", [x], pa, label=lab), Case("max_pool_grad", [x, dy], pa, label=lab)]
    if "avg" in ops:
        out += [Case("avg_pool", [x], pa, label=lab), Case("avg_pool_grad", [dy], {**pa, "x_shape": x}, label=lab)]
    return out


# The conv options (dilation, explicit padding, groups, depthwise) and the pool options
# (explicit padding, count_include_pad), on odd sizes.
CONV_OPTIONS = [
    ((2, 5, 5, 3), (3, 3, 3, 4), {"stride": (1, 1), "padding": "same", "dilation": (2, 1)}, "dil21-same"),
    ((2, 7, 6, 3), (3, 2, 3, 4), {"stride": (2, 1), "padding": "valid", "dilation": (2, 2)}, "dil22-s21-valid"),
    ((2, 5, 5, 3), (3, 3, 3, 4), {"stride": (2, 1), "padding": (1, 0, 2, 1)}, "pad1021-s21"),
    ((1, 4, 5, 2), (2, 3, 2, 3), {"stride": (1, 2), "padding": (0, 2, 1, 0), "dilation": (1, 2)}, "pad0210-dil12"),
    ((2, 5, 4, 6), (3, 2, 3, 4), {"stride": (1, 1), "padding": "same", "groups": 2}, "groups2"),
    ((2, 5, 5, 3), (3, 3, 1, 6), {"stride": (2, 2), "padding": "same", "groups": 3}, "depthwise-x2"),
    (
        (1, 6, 5, 4),
        (3, 3, 1, 4),
        {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (2, 2), "groups": 4},
        "depthwise-dil2",
    ),
]
POOL_OPTIONS = [
    ((2, 5, 6, 3), {"size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 0)}, "pad1110"),
    ((2, 5, 6, 3), {"size": (3, 2), "stride": (1, 2), "padding": (2, 0, 1, 1)}, "pad2011"),
    (
        (2, 5, 6, 3),
        {"size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 0), "count_include_pad": True},
        "pad1110-incl",
    ),
    ((2, 5, 5, 3), {"size": (2, 3), "stride": (1, 1), "padding": "same", "count_include_pad": True}, "same-incl"),
]


def window_cases() -> list[Case]:
    out = []
    x = (2, 5, 5, 3)
    for stride, pad in WINDOWS:
        for kh, kw in ((3, 3), (2, 3)):
            wa = {"stride": stride, "padding": pad}
            lab = f"k{kh}{kw}-s{stride[0]}{stride[1]}-{pad}"
            out += conv_cases(x, (kh, kw, 3, 4), wa, lab)
            out += pool_cases(x, {**wa, "size": (kh, kw)}, lab)
    for xs, ws, wa, lab in CONV_OPTIONS:
        out += conv_cases(xs, ws, wa, lab)
    for xs, pa, lab in POOL_OPTIONS:
        out += pool_cases(xs, pa, lab, ("avg",) if "count_include_pad" in pa else ("max", "avg"))
    sym = {"stride": (1, 1), "padding": "same"}
    out.append(Case("conv2d", [("B", 4, 4, 2), (3, 3, 2, 3)], sym, dims={"B": 2}, label="symbolic"))
    out.append(Case("max_pool", [("B", 4, 4, 2)], {**sym, "size": (2, 2)}, dims={"B": 2}, label="symbolic"))
    return out


def norm_cases() -> list[Case]:
    ln = {"axes": (2,), "eps": 1e-3}
    return [
        Case("layer_norm", [(2, 3, 5), (5,), (5,)], ln),
        Case("layer_norm", [(2, 3, 4), (3, 4), (3, 4)], {"axes": (1, 2), "eps": 1e-5}, label="two-axes"),
        Case("layer_norm", [("B", 4), (4,), (4,)], {"axes": (1,), "eps": 1e-5}, dims={"B": 3}, label="symbolic"),
        Case("rms_norm", [(2, 3, 5), (5,)], ln),
        Case("rms_norm", [("B", 6), (6,)], {"axes": (1,), "eps": 1e-6}, dims={"B": 2}, label="symbolic"),
    ]


def attention_cases() -> list[Case]:
    out = []
    for causal in (False, True):
        attrs = {"causal": causal, "scale": 0.4}
        label = "causal" if causal else "full"
        out += [
            Case("attention", [(2, 5, 3)] * 3, attrs, label=f"{label}-rank3"),
            Case("attention", [(2, 2, 6, 4)] * 3, {**attrs, "scale": 0.5}, label=f"{label}-heads"),
            Case("attention", [("B", 2, "T", 3)] * 3, attrs, dims={"B": 2, "T": 4}, label=f"{label}-symbolic"),
        ]
    return out


CASES: list[Case] = (
    unary_cases()
    + binary_cases()
    + where_cases()
    + layout_cases()
    + reduce_cases()
    + matmul_cases()
    + window_cases()
    + norm_cases()
    + attention_cases()
)


# -- building and checking a case ---------------------------------------------------


@dataclass
class Built:
    graph: object
    names: list[str]
    values: dict[str, np.ndarray]
    dims: dict[str, int]
    wrt: list[str]
    out_shape: tuple


def build(case: Case, seed: int = 0) -> Built:
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    names = [f"x{k}" for k in range(len(case.shapes))]
    doms = case.domains or ["normal"] * len(case.shapes)
    values = {}
    ids = []
    for name, shape, dom in zip(names, case.shapes, doms):
        ids.append(b.input(name, shape, dtype="i32" if dom == "ids" else "f32"))
        value = sample(rng, dom, bind(shape, case.dims))
        values[name] = np.asarray(value, dtype=np.int32 if dom == "ids" else float)
    y = b.add(case.op, ids, **case.attrs)
    r = b.input("r", b.shape(y))
    values["r"] = np.asarray(rng.normal(size=bind(b.shape(y), case.dims)))
    prod = b.add("mul", [y, r])
    loss = b.add("sum", [prod], axes=tuple(range(len(b.shape(y)))), keepdims=False)
    b.declare("loss", loss, None)
    b.loss("loss", loss)
    wrt = [names[k] for k in (case.wrt if case.wrt is not None else range(len(names)))]
    return Built(b.build(), names, values, dict(case.dims), wrt, b.shape(y))


def loss_value(bt: Built, values: dict[str, np.ndarray]) -> float:
    g = bt.graph
    i = g.names["loss"]
    return float(evaluate(g, [i], values, bt.dims, np.float64)[i])


def symbolic_grads(bt: Built) -> dict[str, np.ndarray]:
    g, grads = differentiate(bt.graph, "loss", bt.wrt)
    check_graph(g)
    vals = evaluate(g, list(grads.values()), bt.values, bt.dims, np.float64)
    return {name: vals[i] for name, i in grads.items()}


def numeric_grad(bt: Built, name: str, h: float = 1e-6) -> np.ndarray:
    x = bt.values[name]
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        out[idx] = (loss_value(bt, {**bt.values, name: plus}) - loss_value(bt, {**bt.values, name: minus})) / (2 * h)
    return out


def test_every_differentiable_op_is_covered():
    covered = {c.op for c in CASES}
    for name, op in registry.REGISTRY.items():
        if op.differentiable:
            assert name in GRADIENTS, f"differentiable op '{name}' has no gradient rule"
            assert name in covered, f"differentiable op '{name}' has no gradient test case"
            assert name in TORCH, f"differentiable op '{name}' has no PyTorch counterpart here"


def test_non_differentiable_ops_have_no_rule():
    for name, op in registry.REGISTRY.items():
        if not op.differentiable:
            assert name not in GRADIENTS, f"'{name}' is not differentiable but has a rule"


def test_take_passes_no_gradient():
    # take only gathers training data (compiler/resident.py): the data gets zeros, the
    # indices nothing, and the rest of the graph its gradients as without it.
    b = GraphBuilder()
    x, i, w = b.input("x", (4, 3)), b.input("i", ("B",)), b.input("w", (3,))
    y = b.add("mul", [b.add("take", [x, i]), w])
    b.declare("loss", b.add("sum", [y], axes=(0, 1), keepdims=False), None)
    b.loss("loss", b.names["loss"])
    g, grads = differentiate(b.build(), "loss", ["x", "w"])
    xs = RNG.normal(size=(4, 3))
    rows = np.array([3.0, 0.0, 3.0, 1.0, 2.0])
    vals = evaluate(g, list(grads.values()), {"x": xs, "i": rows, "w": np.ones(3)}, {"B": 5}, np.float64)
    np.testing.assert_array_equal(vals[grads["x"]], np.zeros((4, 3)))
    np.testing.assert_allclose(vals[grads["w"]], xs[[3, 0, 3, 1, 2]].sum(axis=0))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_central_differences(case: Case):
    bt = build(case)
    got = symbolic_grads(bt)
    for name in bt.wrt:
        want = numeric_grad(bt, name)
        assert got[name].shape == want.shape
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=f"d loss / d {name} for {case.id}")


# -- PyTorch ------------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _tf_pads(x_shape, k, attrs):
    """(top, bottom, left, right) zero padding as the windows read it ("same" as TensorFlow
    places it)."""
    _, _, t, b, left, r = window_pads(x_shape, k, attrs)
    return t, b, left, r


def _t_conv2d(torch, x, w, attrs):
    F = torch.nn.functional
    t, b, left, r = _tf_pads(x.shape, w.shape[:2], attrs)
    xp = F.pad(x.permute(0, 3, 1, 2), (left, r, t, b))
    y = F.conv2d(
        xp,
        w.permute(3, 2, 0, 1),
        stride=attrs["stride"],
        dilation=attrs.get("dilation", 1),
        groups=attrs.get("groups", 1),
    )
    return y.permute(0, 2, 3, 1)


def _t_pool(torch, x, attrs, kind):
    F = torch.nn.functional
    t, b, left, r = _tf_pads(x.shape, attrs["size"], attrs)
    xc = x.permute(0, 3, 1, 2)
    k, s = attrs["size"], attrs["stride"]
    if kind == "max":
        y = F.max_pool2d(F.pad(xc, (left, r, t, b), value=-float("inf")), k, s)
    elif attrs.get("count_include_pad"):
        y = F.avg_pool2d(F.pad(xc, (left, r, t, b)), k, s)
    else:
        total = F.avg_pool2d(F.pad(xc, (left, r, t, b)), k, s) * (k[0] * k[1])
        ones = F.pad(torch.ones_like(xc[:1, :1]), (left, r, t, b))
        count = F.avg_pool2d(ones, k, s) * (k[0] * k[1])
        y = total / count
    return y.permute(0, 2, 3, 1)


def _t_vjp(torch, f, x_shape, dy, dtype):
    """d <dy, f(x)> / dx at x = 0, kept differentiable (f is linear in x)."""
    x0 = torch.zeros(x_shape, dtype=dtype, requires_grad=True)
    (gx,) = torch.autograd.grad(f(x0), x0, dy, create_graph=True)
    return gx


def _t_conv_grad_input(torch, dy, w, attrs, dims):
    x_shape = bind(attrs["x_shape"], dims)
    return _t_vjp(torch, lambda x: _t_conv2d(torch, x, w, attrs), x_shape, dy, dy.dtype)


def _t_conv_grad_filter(torch, x, dy, attrs, dims):
    return _t_vjp(torch, lambda w: _t_conv2d(torch, x, w, attrs), attrs["w_shape"], dy, dy.dtype)


def _t_max_pool_grad(torch, x, dy, attrs, dims):
    xd = x.detach().requires_grad_()
    (gx,) = torch.autograd.grad(_t_pool(torch, xd, attrs, "max"), xd, dy, create_graph=True)
    return gx


def _t_avg_pool_grad(torch, dy, attrs, dims):
    x_shape = bind(attrs["x_shape"], dims)
    return _t_vjp(torch, lambda x: _t_pool(torch, x, attrs, "avg"), x_shape, dy, dy.dtype)


def _t_pad(torch, x, a):
    widths = []
    for lo, hi in reversed(list(zip(a["before"], a["after"]))):
        widths += [lo, hi]
    return torch.nn.functional.pad(x, widths)


def _t_reduce(fn):
    def f(torch, x, a, dims):
        return getattr(torch, fn)(x, dim=a["axes"], keepdim=a["keepdims"]) if a["axes"] else x

    return f


def _t_matmul(torch, a, b, at, dims):
    if at["ta"]:
        a = a.transpose(-1, -2)
    if at["tb"]:
        b = b.transpose(-1, -2)
    return torch.matmul(a, b)


def _t_slice(torch, x, a, dims):
    size = bind(a["size"], dims)
    return x[tuple(slice(b, b + s) for b, s in zip(a["begin"], size))]


def _u(fn):
    return lambda torch, x, a, dims: fn(torch, x, a)


def _oracle(op: registry.OpDef):
    return lambda t, *xs_a_dims: op.oracle.torch(t, *xs_a_dims[:-2], **xs_a_dims[-2])


# PyTorch's equivalents: the elementwise entries' oracles, and these.
TORCH = {
    **{
        name: _oracle(op)
        for name, op in registry.REGISTRY.items()
        if op.kind == "elementwise" and op.oracle is not None and op.oracle.torch is not None
    },
    "where": lambda t, c, x, y, a, dims: t.where(c != 0, x, y),
    "reshape": lambda t, x, a, dims: x.reshape(bind(a["shape"], dims)),
    "broadcast_to": lambda t, x, a, dims: x.broadcast_to(bind(a["shape"], dims)),
    "transpose": lambda t, x, a, dims: x.permute(a["perm"]),
    "slice": _t_slice,
    "pad": _u(lambda t, x, a: _t_pad(t, x, a)),
    "concat": lambda t, *xs_a_dims: t.cat(xs_a_dims[:-2], dim=xs_a_dims[-2]["axis"]),
    "sum": _t_reduce("sum"),
    "max": _t_reduce("amax"),
    "min": _t_reduce("amin"),
    "matmul": _t_matmul,
    "layer_norm": lambda t, x, g, b, a, dims: t.nn.functional.layer_norm(x, g.shape, g, b, eps=a["eps"]),
    "rms_norm": lambda t, x, g, a, dims: t.nn.functional.rms_norm(x, g.shape, g, eps=a["eps"]),
    "conv2d": lambda t, x, w, a, dims: _t_conv2d(t, x, w, a),
    "conv2d_grad_input": _t_conv_grad_input,
    "conv2d_grad_filter": _t_conv_grad_filter,
    "max_pool": lambda t, x, a, dims: _t_pool(t, x, a, "max"),
    "avg_pool": lambda t, x, a, dims: _t_pool(t, x, a, "avg"),
    "max_pool_grad": _t_max_pool_grad,
    "avg_pool_grad": _t_avg_pool_grad,
    "gather": _oracle(registry.get("gather")),
    "pick": _oracle(registry.get("pick")),
    "attention": lambda t, q, k, v, a, dims: t.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=a["causal"], scale=a["scale"]
    ),
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_pytorch(case: Case):
    torch = _torch()
    if torch is None:
        pytest.skip("PyTorch is not installed (pip install torch): the central-difference check still runs")
    bt = build(case)
    got = symbolic_grads(bt)
    ts = {
        n: torch.tensor(bt.values[n])  # i32 indices as integer tensors
        if bt.values[n].dtype == np.int32
        else torch.tensor(bt.values[n], dtype=torch.float64, requires_grad=n in bt.wrt)
        for n in bt.names
    }
    y = TORCH[case.op](torch, *(ts[n] for n in bt.names), case.attrs, bt.dims)
    # forward agrees with the reference first, so the gradients compare like with like
    ref = evaluate(bt.graph, [len(bt.names)], bt.values, bt.dims, np.float64)[len(bt.names)]
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    loss = (y * torch.tensor(bt.values["r"])).sum()
    want = torch.autograd.grad(loss, [ts[n] for n in bt.wrt], allow_unused=True)
    for name, w in zip(bt.wrt, want):
        w = np.zeros(bt.values[name].shape) if w is None else w.numpy()
        np.testing.assert_allclose(got[name], w, rtol=1e-9, atol=1e-12, err_msg=f"d loss / d {name} for {case.id}")
