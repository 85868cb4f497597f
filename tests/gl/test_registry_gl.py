"""Every registry op, forward and gradient, on GL against the NumPy reference.

The sweep is over the registry: an op without a case here fails
`test_every_op_has_a_gl_case`. Sizes are odd (no multiple of a work group or of 4, save a
few cases that take the vec4 path), broadcasting and symbolic dims included. Gradients are
the autodiff graph of `sum(op(x...) * r)` run on GL, compared with the reference evaluating
the same graph (test_gradients.py checks that graph against finite differences).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from gl_helpers import fragment_compile_log
from special_values import AND_CASES, MOD_CASES, ROUND_CASES, SPECIALS, pow_inputs, same_specials

import dlc
from dlc.compiler import registry
from dlc.compiler.autodiff import differentiate
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.ops.window import window_pads
from dlc.compiler.reference import evaluate
from dlc.compiler.shapes import bind

pytestmark = pytest.mark.gl


@dataclass
class Case:
    op: str
    shapes: list[tuple]
    attrs: dict = field(default_factory=dict)
    domains: list[str] | None = None  # normal, positive, ints (small integers: ties), cond
    dims: dict = field(default_factory=dict)
    label: str = ""
    grad: bool = True  # also check the gradient (when the op is differentiable)

    @property
    def id(self) -> str:
        shapes = "x".join("[" + ",".join(map(str, s)) + "]" for s in self.shapes)
        return f"{self.op}-{self.label or shapes}"


def sample(rng, domain: str, shape) -> np.ndarray:
    if domain == "cond":
        return (rng.uniform(size=shape) > 0.5).astype(float)
    if domain == "index":
        return rng.integers(-1, 6, size=shape).astype(float)  # some out of [0, depth)
    if domain == "rows":
        return rng.integers(0, 3, size=shape).astype(float)  # rows of a tensor of >= 3
    if domain == "position":  # attention_cached's first new position: past a work group's keys
        return rng.integers(33, 60, size=shape).astype(np.int32)
    if domain == "late_position":  # past 256 keys: an invocation takes two or more
        return rng.integers(270, 290, size=shape).astype(np.int32)
    if domain == "counter":  # a random op's seed or step: an integer exact in float32
        return rng.integers(0, 2**24, size=shape).astype(float)
    return registry.sample(domain, rng, shape)  # the domains entries' oracles name


def _domains_attrs(op: registry.OpDef) -> tuple[list[str], dict]:
    """An elementwise entry's input domains and first attr set, from its oracle."""
    if op.oracle is None:
        return ["normal"] * op.arity, {}
    return op.oracle.domains(op.arity), dict(op.oracle.attrs[0])


ODD = (3, 5, 7)
# The random ops: elementwise over (seed, step) scalars, of a shape of their own (attr).
RANDOM = ("random_uniform", "random_normal")


def elementwise_cases() -> list[Case]:
    out = []
    for name, op in registry.REGISTRY.items():
        if op.kind != "elementwise" or name == "dim_size":
            continue
        if name in RANDOM:
            seeds = ["counter", "counter"]
            out.append(Case(name, [(), ()], {"shape": ODD, "key": 7}, seeds, label="odd"))
            out.append(Case(name, [(), ()], {"shape": (4, 6), "key": 2}, seeds, label="vec4"))
            sym = {"shape": ("B", 5), "key": 11}
            out.append(Case(name, [(), ()], sym, seeds, dims={"B": 3}, label="symbolic"))
            continue
        dom, attrs = _domains_attrs(op)
        if op.arity == 1:
            out.append(Case(name, [ODD], attrs, domains=dom))
            out.append(Case(name, [(2, 6)], attrs, domains=dom, label="vec4", grad=False))
        elif op.arity == 2:
            out.append(Case(name, [ODD, (5, 1)], domains=dom))
            out.append(Case(name, [(), (2, 3)], domains=dom))
            out.append(Case(name, [("B", 3), (1, 3)], domains=dom, dims={"B": 5}, label="symbolic"))
    out.append(Case("pow", [(3, 4), ()], domains=["normal", "ints"], label="neg-base", grad=False))
    out.append(Case("where", [(2, 3), (3,), (2, 1)], domains=["cond", "normal", "normal"]))
    out.append(
        Case("where", [("B", 5), (5,), ()], domains=["cond", "normal", "normal"], dims={"B": 3}, label="symbolic")
    )
    return out


def layout_cases() -> list[Case]:
    return [
        Case("reshape", [(3, 5, 7)], {"shape": (7, 15)}),
        Case("reshape", [("B", 6)], {"shape": ("B", 2, 3)}, dims={"B": 3}, label="symbolic"),
        Case("broadcast_to", [(3, 1)], {"shape": (2, 3, 5)}),
        Case("broadcast_to", [("B", 1)], {"shape": ("B", 7)}, dims={"B": 3}, label="symbolic"),
        Case("transpose", [(3, 5, 7)], {"perm": (2, 0, 1)}),
        Case("transpose", [("B", 5)], {"perm": (1, 0)}, dims={"B": 3}, label="symbolic"),
        Case("slice", [(5, 7)], {"begin": (1, 2), "size": (3, 4)}),
        Case("slice", [("B", 7)], {"begin": (0, 3), "size": ("B", 3)}, dims={"B": 2}, label="symbolic"),
        Case("pad", [(3, 5)], {"before": (1, 0), "after": (2, 3)}),
        Case("pad", [("B", 5)], {"before": (0, 2), "after": (0, 1)}, dims={"B": 3}, label="symbolic"),
        Case("concat", [(3, 2), (3, 1), (3, 4)], {"axis": 1}),
        Case("concat", [(1, 5), (2, 5)], {"axis": 0}),
        Case("one_hot", [(3, 5)], {"depth": 4}, ["index"]),
        Case("one_hot", [("B",)], {"depth": 6}, ["index"], dims={"B": 7}, label="symbolic"),
        Case("take", [(5, 7), (9,)], {}, ["normal", "rows"]),
        Case("take", [(3, 2, 5), ("B",)], {}, ["normal", "rows"], dims={"B": 7}, label="symbolic"),
        Case("take", [(3, 4), (8,)], {}, ["normal", "rows"], label="vec4"),
        # i32 operands ("ids": int32 in [0, 3), stored as their bits)
        Case("gather", [(5, 7), (9,)], {"axis": 0}, ["normal", "ids"]),
        Case("gather", [(3, 4, 5), ("B", 2)], {"axis": 1}, ["normal", "ids"], dims={"B": 3}, label="axis1"),
        Case("gather_grad", [(2, 9, 3), (9,)], {"axis": 1, "table": (2, 5, 3)}, ["normal", "ids"]),
        Case("gather_grad", [("B", 2, 7), ("B", 2)], {"axis": 0, "table": (4, 7)}, ["normal", "ids"], dims={"B": 3}),
        Case("pick", [(3, 5, 7), (3, 5)], {}, ["normal", "ids"]),
        Case("one_hot", [(3, 5)], {"depth": 4}, ["ids"], label="i32"),
        Case("reshape", [(3, 4)], {"shape": (2, 6)}, ["ids"], label="i32"),
        Case("transpose", [(3, 5)], {"perm": (1, 0)}, ["ids"], label="i32"),
        Case("concat", [(3, 2), (3, 1)], {"axis": 1}, ["ids", "ids"], label="i32"),
        Case("eq", [(3, 5), (5,)], {}, ["ids", "ints"], label="i32"),
        Case("lt", [(3, 5), (5,)], {}, ["ids", "ids"], label="i32-i32"),
        Case("where", [(3, 5), (5,), ()], {}, ["ids", "normal", "normal"], label="i32-cond"),
        Case("float", [(3, 5)], {}, ["ids"], label="i32"),
        Case("iota", [], {"shape": (3, 5, 7), "axis": 1}),
        Case("iota", [], {"shape": ("B", 5), "axis": 0}, dims={"B": 3}, label="symbolic"),
    ]


def reduce_cases() -> list[Case]:
    out = []
    for op in ("sum", "max", "min"):
        out += [
            Case(op, [ODD], {"axes": (1,), "keepdims": False}, label="ax1"),
            Case(op, [ODD], {"axes": (0, 2), "keepdims": True}, label="ax02keep"),
            Case(op, [ODD], {"axes": (0, 1, 2), "keepdims": False}, label="all"),
            Case(op, [(3, 301)], {"axes": (1,), "keepdims": True}, label="longrow"),
            Case(op, [(70, 300)], {"axes": (0,), "keepdims": True}, label="longcol"),
            Case(op, [("B", 3)], {"axes": (0,), "keepdims": False}, dims={"B": 5}, label="symbolic"),
            # many rows of 16 to 4096 over trailing axes: a run of lanes a row (kernels_reduce_rows)
            Case(op, [(200, 64)], {"axes": (1,), "keepdims": False}, label="rows64"),
            Case(op, [(150, 3, 70)], {"axes": (1, 2), "keepdims": True}, label="rows-ragged"),
            Case(op, [("B", 17)], {"axes": (1,), "keepdims": False}, dims={"B": 300}, label="rows-symbolic"),
        ]
    for op in ("argmax", "argmin"):
        out += [
            Case(op, [ODD], {"axis": 2}, ["ints"], label="ties"),
            Case(op, [ODD], {"axis": 0}, label="ax0"),
            Case(op, [(2, 300)], {"axis": 1}, label="longrow"),
        ]
    return out


def matmul_cases() -> list[Case]:
    out = []
    m, k, n = 5, 7, 3
    for ta in (False, True):
        for tb in (False, True):
            a = (k, m) if ta else (m, k)
            b = (n, k) if tb else (k, n)
            out.append(Case("matmul", [a, b], {"ta": ta, "tb": tb}, label=f"2x2-{ta:d}{tb:d}"))
            out.append(Case("matmul", [(2, *a), (2, *b)], {"ta": ta, "tb": tb}, label=f"3x3-{ta:d}{tb:d}"))
    f = {"ta": False, "tb": False}
    out += [
        Case("matmul", [(m, k), (2, k, n)], f, label="2x3"),
        Case("matmul", [(1, m, k), (3, k, n)], f, label="batch-broadcast"),
        Case("matmul", [("B", k), (k, n)], f, dims={"B": 9}, label="symbolic"),
        Case("matmul", [(2, 1, m, k), (3, k, n)], f, label="rank4-broadcast"),
        Case("matmul", [("B", 2, k, m), (1, 2, n, k)], {"ta": True, "tb": True}, dims={"B": 3}, label="rank4-sym"),
        # batch dims broadcast both ways, several on each side; large enough for the texture
        # target's packed passes
        Case("matmul", [(2, 1, 3, 24, 16), (1, 2, 3, 16, 40)], f, label="rank5-packed"),
    ]
    return out


def _conv(x, w, wa, lab) -> list[Case]:
    oh, ow = window_pads(x, w[:2], wa)[:2]
    dy = (x[0], oh, ow, w[3])
    return [
        Case("conv2d", [x, w], wa, label=lab),
        Case("conv2d_grad_input", [dy, w], {**wa, "x_shape": x}, label=lab),
        Case("conv2d_grad_filter", [x, dy], {**wa, "w_shape": w}, label=lab),
    ]


def _pools(x, pa, lab, ops=("max", "avg")) -> list[Case]:
    oh, ow = window_pads(x, pa["size"], pa)[:2]
    dy = (x[0], oh, ow, x[3])
    out = []
    if "max" in ops:
        out += [Case("max_pool", [x], pa, label=lab), Case("max_pool_grad", [x, dy], pa, label=lab)]
    if "avg" in ops:
        out += [Case("avg_pool", [x], pa, label=lab), Case("avg_pool_grad", [dy], {**pa, "x_shape": x}, label=lab)]
    return out


def window_cases() -> list[Case]:
    out = []
    x = (2, 5, 6, 3)
    for stride, pad in (((1, 1), "same"), ((2, 2), "valid"), ((2, 1), "same")):
        k = (3, 2)
        wa = {"stride": stride, "padding": pad}
        lab = f"s{stride[0]}{stride[1]}-{pad}"
        out += _conv(x, (*k, 3, 4), wa, lab) + _pools(x, {**wa, "size": k}, lab)
    # the conv options: dilation, explicit padding, groups, depthwise (odd sizes)
    out += _conv((2, 7, 5, 3), (3, 2, 3, 5), {"stride": (1, 2), "padding": "same", "dilation": (2, 1)}, "dil21-same")
    out += _conv((2, 5, 7, 3), (2, 3, 3, 5), {"stride": (2, 1), "padding": (1, 0, 2, 1)}, "pad1021")
    out += _conv(
        (1, 7, 7, 9),
        (3, 3, 3, 6),
        {"stride": (1, 1), "padding": (2, 1, 0, 2), "dilation": (2, 2), "groups": 3},
        "groups3-dil2",
    )
    out += _conv((2, 7, 5, 5), (3, 3, 1, 5), {"stride": (2, 1), "padding": "same", "groups": 5}, "depthwise")
    out += _conv((1, 5, 5, 3), (3, 3, 1, 6), {"stride": (1, 1), "padding": "valid", "groups": 3}, "depthwise-x2")
    out += _pools((2, 7, 5, 3), {"size": (3, 3), "stride": (2, 2), "padding": (1, 1, 2, 0)}, "pad1120")
    # windows tiling the image (stride = size: max_pool_grad's one-window form), with rows
    # and columns left over (valid), a padded top and left (same, 3 x 3 over 4 x 5) and ties
    # (the ints domain: many equal values a window, the first maximum takes dy)
    out += _pools((2, 5, 7, 3), {"size": (2, 2), "stride": (2, 2), "padding": "valid"}, "tiled-valid", ("max",))
    out += _pools((2, 4, 5, 3), {"size": (3, 3), "stride": (3, 3), "padding": "same"}, "tiled-same", ("max",))
    out += [
        Case(
            "max_pool_grad",
            [(2, 6, 6, 2), (2, 3, 2, 2)],
            {"size": (2, 3), "stride": (2, 3), "padding": "valid"},
            domains=["ints", "normal"],
            label="tiled-ties",
        )
    ]
    out += _pools(
        (2, 7, 5, 3),
        {"size": (3, 2), "stride": (2, 1), "padding": (1, 1, 1, 0), "count_include_pad": True},
        "pad1110-incl",
        ("avg",),
    )
    out += _pools(
        (2, 5, 7, 3),
        {"size": (3, 3), "stride": (1, 2), "padding": "same", "count_include_pad": True},
        "same-incl",
        ("avg",),
    )
    out.append(
        Case(
            "conv2d",
            [("B", 4, 4, 2), (3, 3, 2, 3)],
            {"stride": (1, 1), "padding": "same"},
            dims={"B": 2},
            label="symbolic",
        )
    )
    return out


def norm_cases() -> list[Case]:
    out = []
    for op, extra in (("layer_norm", 2), ("rms_norm", 1)):
        out += [
            Case(op, [(3, 5, 7), *[(7,)] * extra], {"axes": (2,), "eps": 1e-5}),
            Case(op, [(2, 3, 5), *[(3, 5)] * extra], {"axes": (1, 2), "eps": 1e-3}, label="two-axes"),
            Case(op, [("B", 9), *[()] * extra], {"axes": (1,), "eps": 1e-5}, dims={"B": 5}, label="symbolic-scalar"),
            # 64 lanes a row, 11 elements each, the last past the row in some lanes
            Case(op, [(3, 700), *[(700,)] * extra], {"axes": (1,), "eps": 1e-5}, label="longrow"),
            # a GPT's rows: 4 rows a work group, the last group's rows past the end partly
            Case(op, [(5, 384), *[(384,)] * extra], {"axes": (1,), "eps": 1e-5}, label="rows384"),
            Case(op, [(3, 130), *[(130,)] * extra], {"axes": (1,), "eps": 1e-5}, label="ragged"),
            # past 16 x 256 elements: one work group a row, each invocation strides over it
            Case(op, [(2, 4500), *[(4500,)] * extra], {"axes": (1,), "eps": 1e-5}, label="strided"),
        ]
        grad = f"{op}_grad"
        out += [
            Case(grad, [(3, 5, 7), (7,), (3, 5, 7)], {"axes": (2,), "eps": 1e-5}),
            Case(grad, [("B", 6), (), ("B", 6)], {"axes": (1,), "eps": 1e-4}, dims={"B": 4}, label="symbolic-scalar"),
            Case(grad, [(2, 300), (300,), (2, 300)], {"axes": (1,), "eps": 1e-5}, label="longrow"),
            Case(grad, [(5, 384), (384,), (5, 384)], {"axes": (1,), "eps": 1e-5}, label="rows384"),
            Case(grad, [(3, 130), (130,), (3, 130)], {"axes": (1,), "eps": 1e-5}, label="ragged"),
            Case(grad, [(2, 4500), (4500,), (2, 4500)], {"axes": (1,), "eps": 1e-5}, label="strided"),
        ]
    return out


def attention_cases() -> list[Case]:
    """T of 70 crosses a work group's 64 rows and is no multiple of a tile's rows."""
    out = []
    for causal in (False, True):
        a = {"causal": causal, "scale": 0.3}
        c = "causal" if causal else "full"
        out += [
            Case("attention", [(2, 3, 5, 4)] * 3, a, label=c),
            Case("attention", [(1, 70, 8)] * 3, a, label=f"{c}-T70"),
            Case("attention", [("B", 2, "T", 8)] * 3, a, dims={"B": 2, "T": 37}, label=f"{c}-symbolic"),
            Case("attention_lse", [(2, 70, 8)] * 2, a, label=f"{c}-T70"),
            Case("attention_packed", [(2, 70, 8)] * 3, a, label=f"{c}-T70"),
            Case("attention_packed", [(3, 9, 5)] * 3, a, label=f"{c}-head5"),
        ]
        for wrt in ("q", "k", "v", "kv"):
            shapes = [(2, 70, 8)] * 4 + [(2, 70)] * 2
            out.append(Case("attention_grad", shapes, {**a, "wrt": wrt}, label=f"{c}-{wrt}-T70"))
        # dk and dv of one kernel with rows as floats (a head of 5)
        out.append(Case("attention_grad", [(3, 9, 5)] * 4 + [(3, 9)] * 2, {**a, "wrt": "kv"}, label=f"{c}-kv-head5"))
    out.append(Case("attention", [(1, 2, 40, 64)] * 3, {"causal": True, "scale": 0.125}, label="head64"))
    # a head of 5: rows as floats, not vec4 words
    out.append(Case("attention", [(2, 67, 5)] * 3, {"causal": True, "scale": 0.4}, label="head5"))
    # n new queries over a cache of 70 rows from a position past 32 keys (ops/kv_cache.py)
    cached = ["normal"] * 2 + ["position"]
    for lead, n, d, dims in (((2, 3), 1, 8, {}), ((2, 3), 3, 8, {}), (("B", 2), "T", 5, {"B": 2, "T": 4})):
        shapes = [(*lead, n, d), (2, *lead, 70, d), (1,)]
        out.append(Case("attention_cached", shapes, {"scale": 0.3}, cached, dims=dims, label=f"new{n}-head{d}"))
        rows = {"scale": 0.3, "rows_first": True}  # out [..., n, H, D]
        out.append(Case("attention_cached", shapes, rows, cached, dims=dims, label=f"new{n}-head{d}-rows-first"))
    # the last row of a window over the window's own keys and values (S symbolic)
    shapes = [(2, 3, 1, 8), (2, 2, 3, "S", 8), (1,)]
    out.append(Case("attention_cached", shapes, {"scale": 0.3}, cached, dims={"S": 61}, label="symbolic-rows"))
    # a cache of 300 rows read from past 256 keys (an invocation sums two keys or more)
    shapes = [(1, 2, 2, 8), (2, 1, 2, 300, 8), (1,)]
    late = ["normal"] * 2 + ["late_position"]
    out.append(Case("attention_cached", shapes, {"scale": 0.3}, late, label="rows300-late"))
    return out


CASES = (
    elementwise_cases()
    + layout_cases()
    + reduce_cases()
    + matmul_cases()
    + window_cases()
    + norm_cases()
    + attention_cases()
)
GRAD_CASES = [c for c in CASES if c.grad and registry.get(c.op).differentiable]


def build(case: Case, seed: int = 0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    doms = case.domains or ["normal"] * len(case.shapes)
    feeds, ids = {}, []
    for k, (shape, dom) in enumerate(zip(case.shapes, doms)):
        whole = dom in ("ids", "position", "late_position")
        ids.append(b.input(f"x{k}", shape, dtype="i32" if whole else "f32"))
        feeds[f"x{k}"] = np.asarray(sample(rng, dom, bind(shape, case.dims)), np.int32 if whole else np.float32)
    y = b.add(case.op, ids, **case.attrs)
    b.declare("y", y, None)
    r = b.input("r", b.shape(y))
    feeds["r"] = np.asarray(rng.normal(size=bind(b.shape(y), case.dims)), np.float32)
    yf = b.add("float", [y]) if b.dtype(y) == "i32" else y
    loss = b.add("sum", [b.add("mul", [yf, r])], axes=tuple(range(len(b.shape(y)))), keepdims=False)
    b.declare("loss", loss, None)
    b.loss("loss", loss)
    return b.build(), feeds


def test_every_op_has_a_gl_case():
    covered = {c.op for c in CASES} | {"dim_size"}
    graded = {c.op for c in GRAD_CASES}
    for name, op in registry.REGISTRY.items():
        if op.kind == "leaf":
            continue
        assert name in covered, f"op '{name}' has no GL forward case"
        if op.differentiable:
            assert name in graded, f"differentiable op '{name}' has no GL gradient case"


def close(got, want, what):
    assert got.shape == want.shape, what
    assert got.dtype == want.dtype or want.dtype != np.int32, f"{what}: {got.dtype}, not int32"
    if want.dtype == np.int32:  # ids are exact
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_reference(backend, case: Case):
    g, feeds = build(case)
    y = g.names["y"]
    (got,) = backend.run(g, [y], {k: v for k, v in feeds.items() if k != "r"}, case.dims)
    want = evaluate(g, [y], feeds, case.dims)[y]
    close(got, want, case.id)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.id)
def test_gradient_matches_reference(backend, case: Case):
    g, feeds = build(case)
    wrt = [
        f"x{k}"
        for k, d in enumerate(case.domains or ["normal"] * len(case.shapes))
        if d not in ("cond", "index", "ints", "ids")
    ]
    gg, grads = differentiate(g, "loss", wrt)
    roots = [grads[n] for n in wrt]
    got = backend.run(gg, roots, feeds, case.dims)
    want = evaluate(gg, roots, feeds, case.dims)
    for name, r, v in zip(wrt, roots, got):
        close(v, want[r], f"d loss / d {name} for {case.id}")


def test_dim_size_follows_the_binding(backend):
    b = GraphBuilder()
    x = b.input("x", ("B", 3))
    n = b.add("dim_size", [], dims=("B", 3))
    y = b.add("div", [b.add("sum", [x], axes=(0, 1), keepdims=False), n])
    g = b.build()
    for size in (1, 4, 300):
        xs = np.arange(size * 3, dtype=np.float32).reshape(size, 3)
        (nv, yv) = backend.run(g, [n, y], {"x": xs}, {"B": size})
        assert float(nv) == size * 3
        np.testing.assert_allclose(yv, xs.mean(), rtol=1e-6)


# -- NaN, infinities and signed zeros: NumPy's semantics on GL -----------------------------


def special_inputs(op: str, arity: int, n: int) -> list[np.ndarray]:
    """Every special value against every other: operand k varies along axis k."""
    s = SPECIALS[:n]
    shapes = [[1] * arity for _ in range(arity)]
    for k in range(arity):
        shapes[k][k] = len(s)
    return [s.reshape(sh) for sh in shapes]


ELEMENTWISE = sorted(
    name
    for name, op in registry.REGISTRY.items()
    if op.kind == "elementwise" and name != "dim_size" and name not in RANDOM  # random: integer counters
)


@pytest.mark.parametrize("n", [len(SPECIALS), len(SPECIALS) - 1], ids=["vec4", "odd"])
@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_special_values_match_numpy(backend, op, n):
    arity = registry.get(op).arity
    xs = special_inputs(op, arity, n)
    b = GraphBuilder()
    ids = [b.input(f"x{k}", x.shape) for k, x in enumerate(xs)]
    y = b.add(op, ids, **_domains_attrs(registry.get(op))[1])
    g = b.build()
    feeds = {f"x{k}": x for k, x in enumerate(xs)}
    (got,) = backend.run(g, [y], feeds, {})
    with np.errstate(all="ignore"):
        want = evaluate(g, [y], feeds, {})[y]
    same_specials(got, want, op)


SUBNORMALS = np.array([1e-40, -1e-40, 1e-38, -1e-38, 1.4e-45, 5e-39], np.float32)


def _flushed(x: np.ndarray) -> np.ndarray:
    """x with each subnormal value made a zero of its sign."""
    x = np.array(x, np.float32)
    sub = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    x[sub] = np.copysign(0.0, x[sub])
    return x


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: both NaN, equal (infinities too), or close."""
    with np.errstate(all="ignore"):
        close = np.isclose(got, want, rtol=1e-4, atol=1e-6) & ~np.isinf(got) & ~np.isinf(want)
    return (np.isnan(got) & np.isnan(want)) | (got == want) | close


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_subnormals_follow_the_device(backend, op):
    """Subnormal operands against every special value and each other: NumPy's answer where
    the shader stage keeps subnormals (runtime/subnormals.py's probe); where it flushes them,
    NumPy's with subnormal operands and results read as zeros of their sign, or kept (README
    "Limits"; log and pow read subnormal operands exactly everywhere: test_numerics_gl.py)."""
    from dlc.runtime import subnormals

    found = subnormals.of()
    kept = found.compute if backend.target == "compute" else found.fragment
    arity = registry.get(op).arity
    attrs = _domains_attrs(registry.get(op))[1]
    wide = np.concatenate([SUBNORMALS, SPECIALS])
    for k in range(arity):  # operand k takes every value, the others the subnormals
        xs = []
        for j in range(arity):
            shape = [1] * arity
            v = wide if j == k else SUBNORMALS
            shape[j] = len(v)
            xs.append(v.reshape(shape))
        b = GraphBuilder()
        y = b.add(op, [b.input(f"x{j}", x.shape) for j, x in enumerate(xs)], **attrs)
        g = b.build()
        feeds = {f"x{j}": x for j, x in enumerate(xs)}
        (got,) = backend.run(g, [y], feeds, {})
        with np.errstate(all="ignore"):
            want = evaluate(g, [y], feeds, {})[y]
            flushed_in = evaluate(g, [y], {n: _flushed(x) for n, x in feeds.items()}, {})[y]
        what = f"{op} with operand {k} over {wide.tolist()}"
        if kept:
            same_specials(got, want, what)
            continue
        ok = _same(_flushed(got), _flushed(want)) | _same(_flushed(got), _flushed(flushed_in))
        bad = np.argwhere(~ok)
        assert not bad.size, f"{what}: at {bad[0].tolist()} got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}"


# The operand a padded convolution multiplies by its zero padding: the reference pads with
# zeros (0 * NaN = 0 * inf = NaN at the border) where the GL kernels skip padded taps, so there
# it gets signed zeros only (unpadded convolutions get every special value in every operand).
PADDED_PRODUCT = {"conv2d": 1, "conv2d_grad_input": 1, "conv2d_grad_filter": 1}


def inject_specials(case: Case, feeds: dict, seed: int = 1) -> dict:
    """The case's float inputs with about a quarter of their elements made NaN, +-inf or +-0."""
    rng = np.random.default_rng(seed)
    out = dict(feeds)
    for k in range(len(case.shapes)):  # indexes too: take's NaN row is NaN, one_hot's zeros
        x = out[f"x{k}"].copy()
        if x.dtype == np.int32:  # i32 ids hold no NaN (their own sweep: test_integers_gl.py)
            continue
        hit = rng.uniform(size=x.shape) < 0.25
        pads = case.attrs.get("padding", "valid")
        padded = pads != "valid" and any(pads) and PADDED_PRODUCT.get(case.op) == k
        pool = SPECIALS[[3, 4]] if padded else SPECIALS[:5]
        x[hit] = rng.choice(pool, size=int(hit.sum()))
        out[f"x{k}"] = x
    return out


SPECIAL_CASES = [c for c in CASES if registry.get(c.op).kind != "elementwise"]


@pytest.mark.parametrize("case", SPECIAL_CASES, ids=lambda c: c.id)
def test_forward_with_nan_and_inf_matches_numpy(backend, case: Case):
    """Reductions, matmul, windows and layout ops propagate NaN and infinities as NumPy does
    (max/min propagate NaN, argmax/argmin give the first NaN's index, max_pool over a window
    holding NaN is NaN)."""
    g, feeds = build(case)
    feeds = inject_specials(case, feeds)
    y = g.names["y"]
    (got,) = backend.run(g, [y], {k: v for k, v in feeds.items() if k != "r"}, case.dims)
    with np.errstate(all="ignore"):
        want = evaluate(g, [y], feeds, case.dims)[y]
    # The sign of a zero max or sum depends on the order NumPy combines in: not compared.
    same_specials(got, want, case.id, rtol=1e-4, atol=1e-4, zero_signs=False)


REDUCE_GEOMETRIES = {
    "thread": ((4, 7), (1,)),
    "group": ((3, 300), (1,)),
    "columns": ((300, 40), (0,)),
    "leading": ((5, 3), (0,)),
    "mixed": ((2, 3, 70), (0, 2)),
}


@pytest.mark.parametrize(
    "op, shape, axes",
    [
        pytest.param(op, shape, axes, id=f"{op}-{name}")
        for op in ("max", "min", "argmax", "argmin", "sum")
        for name, (shape, axes) in REDUCE_GEOMETRIES.items()
        if len(axes) == 1 or not op.startswith("arg")
    ],
)  # argmax/argmin reduce one axis
def test_reductions_of_rows_with_nan(backend, op, shape, axes):
    """A row with one NaN, one with several, one all -inf, one all +inf, one of -0 and 0: every
    kernel template gives NumPy's answer."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=shape).astype(np.float32)
    flat = np.moveaxis(x, axes[0], -1)  # a view: rows along the (first) reduced axis
    flat[0, ..., -1] = np.nan
    flat[1 % flat.shape[0], ..., 1] = np.nan
    flat[1 % flat.shape[0], ..., -2] = np.nan
    flat[-1, ..., :] = -np.inf
    if flat.shape[0] > 3:
        flat[2, ..., :] = np.inf
        flat[3, ..., ::2] = -0.0
        flat[3, ..., 1::2] = 0.0
    b = GraphBuilder()
    xi = b.input("x", shape)
    if op.startswith("arg"):
        y = b.add(op, [xi], axis=axes[0])
    else:
        y = b.add(op, [xi], axes=axes, keepdims=False)
    g = b.build()
    (got,) = backend.run(g, [y], {"x": x}, {})
    with np.errstate(all="ignore"):
        want = evaluate(g, [y], {"x": x}, {})[y]
    if op.startswith("arg"):
        np.testing.assert_array_equal(got, want, err_msg=f"{op} over {shape}")
    else:
        same_specials(got, want, f"{op} over {shape}", rtol=1e-5, atol=1e-5, zero_signs=False)


def test_pow_edge_cases_match_c99(backend):
    """pow on GL against C99's powf case table (NumPy's float32 power), written out by hand."""
    x, y, want = pow_inputs()
    b = GraphBuilder()
    y_ = b.add("pow", [b.input("x", x.shape), b.input("y", y.shape)])
    (got,) = backend.run(b.build(), [y_], {"x": x, "y": y}, {})
    for xi, yi, g, w in zip(x, y, got, want):
        same_specials(np.array([g]), np.array([w]), f"pow({xi}, {yi})", rtol=1e-5)


@pytest.mark.parametrize("m, k, n", [(256, 64, 256), (64, 900, 8)], ids=["tiles", "thin"])
def test_blocked_matmul_propagates_nan_and_inf(backend, m, k, n):
    """The large-tile and thin matmul templates (the sweep's small cases take the 16x16 one):
    NaN rows and columns, inf times 0, inf plus -inf, as NumPy."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    a[rng.uniform(size=a.shape) < 0.001] = np.nan
    b[rng.uniform(size=b.shape) < 0.002] = np.inf
    b[rng.uniform(size=b.shape) < 0.002] = -np.inf
    a[5, :] = 0.0
    g = GraphBuilder()
    y = g.add("matmul", [g.input("a", a.shape), g.input("b", b.shape)], ta=False, tb=False)
    graph = g.build()
    (got,) = backend.run(graph, [y], {"a": a, "b": b}, {})
    with np.errstate(all="ignore"):
        want = evaluate(graph, [y], {"a": a, "b": b}, {})[y]
    assert np.isnan(want).any() and np.isinf(want).any()
    same_specials(got, want, f"matmul {m}x{k}x{n}", rtol=1e-3, atol=1e-3, zero_signs=False)


def test_every_elementwise_op_compiles_as_glsl_es_300(gl):
    """Each entry's GLSL and helpers are also WebGL2's dialect (no implicit int -> float, ...):
    one model applying every elementwise function, its texture shaders compiled as ES 3.00."""
    from dlc.compiler.emit import programs

    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    ops = [
        op
        for op in registry.REGISTRY.values()
        if op.kind == "elementwise" and op.params and op.arity in (1, 2) and op.name not in RANDOM
    ]
    lines = ["input x: [B, 3]", "input y: [B, 3]"]
    lines += [f"o_{op.name} = {op.name}(x{', y' if op.arity == 2 else ''})" for op in ops]
    lines += [f"o_{name} = {name}([B, 3])" for name in RANDOM]  # over the model's seed and step
    model = dlc.compile("\n".join(lines) + "\n")
    sources = [t for p in programs(model, target="texture", options={"es": True}).values() for t in p.sources.values()]
    assert sources
    for source in sources:
        log = fragment_compile_log(source)
        assert log == "", log


def test_mod_round_and_logic_match_hand_written_values(backend):
    """mod, round and the logical ops on GL against values written out by hand (the sweeps
    compare GL with the reference, which is NumPy's np.mod and np.round)."""
    for op, cases in (("mod", MOD_CASES), ("round", ROUND_CASES), ("logical_and", AND_CASES)):
        *xs, want = (np.array(c, np.float32) for c in zip(*cases))
        b = GraphBuilder()
        y = b.add(op, [b.input(f"x{k}", x.shape) for k, x in enumerate(xs)])
        (got,) = backend.run(b.build(), [y], {f"x{k}": x for k, x in enumerate(xs)}, {})
        same_specials(got, want, op, rtol=0, atol=0)
