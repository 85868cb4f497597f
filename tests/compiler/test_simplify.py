"""Each simplify pass alone, on small hand-built graphs, then all of them on real
training steps (values unchanged)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.ir import Graph
from dlc.compiler.reference import evaluate
from dlc.compiler.simplify import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    simplify,
    simplify_algebra,
)
from dlc.compiler.train_graph import build_train_graph
from dlc.compiler.verify import check_graph


def named(b: GraphBuilder, **tensors: int) -> Graph:
    for name, i in tensors.items():
        b.declare(name, i, None)
    return b.build()


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def value(g: Graph, name: str, leaves, dims=None):
    i = g.names[name]
    return evaluate(g, [i], leaves, dims or {}, np.float64)[i]


# -- fold_constants -------------------------------------------------------------------


def test_fold_constants_folds_const_only_subgraphs():
    b = GraphBuilder()
    x = b.input("x", (3,))
    c = b.add("exp", [b.add("add", [b.const(2.0), b.const(1.0)])])
    g = named(b, y=b.add("mul", [x, c]))
    out = fold_constants(g)
    assert ops(out) == ["input", "const", "const", "const", "const", "mul"]
    folded = out.nodes[out.nodes[out.names["y"]].inputs[1]]
    assert folded.op == "const" and folded.attr("value") == pytest.approx((np.exp(3.0),))
    xs = {"x": np.array([1.0, 2.0, 3.0])}
    np.testing.assert_allclose(value(out, "y", xs), value(g, "y", xs))


def test_fold_constants_never_grows_a_constant():
    b = GraphBuilder()
    big = b.add("broadcast_to", [b.const(0.0)], shape=(64, 64))
    small = b.add("sum", [b.const([1.0, 2.0, 3.0], (3,))], axes=(0,), keepdims=False)
    g = named(b, big=big, small=small)
    out = fold_constants(g)
    assert out.node("big").op == "broadcast_to"
    assert out.node("small").op == "const" and out.node("small").attr("value") == (6.0,)


def test_fold_constants_leaves_run_time_values_alone():
    b = GraphBuilder()
    x = b.input("x", ("B",))
    n = b.add("dim_size", [], dims=("B",))
    g = named(b, m=b.add("div", [b.const(1.0), n]), s=b.add("mul", [x, b.const(2.0)]))
    assert ops(fold_constants(g)) == ops(g)


# -- simplify_algebra -----------------------------------------------------------------


@pytest.mark.parametrize(
    "op,unit,side",
    [
        ("add", 0.0, 1),
        ("add", 0.0, 0),
        ("sub", 0.0, 1),
        ("mul", 1.0, 1),
        ("mul", 1.0, 0),
        ("div", 1.0, 1),
        ("pow", 1.0, 1),
    ],
)
def test_algebra_identities(op, unit, side):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    args = [x, b.const(unit)] if side == 1 else [b.const(unit), x]
    g = named(b, y=b.add(op, args))
    out = simplify_algebra(g)
    assert out.names["y"] == out.names["x"]


def test_algebra_keeps_what_is_not_an_identity():
    b = GraphBuilder()
    x = b.input("x", (3,))
    g = named(
        b,
        a=b.add("sub", [b.const(0.0), x]),  # 0 - x is -x, not x
        c=b.add("mul", [x, b.const([1.0] * 6, (2, 3))]),  # broadcasts x up
        d=b.add("mul", [x, b.const(2.0)]),
    )
    out = simplify_algebra(g)
    for name in "acd":
        assert out.names[name] != out.names["x"]


def test_algebra_layout_no_ops_and_double_negation():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    r = b.add("reshape", [b.add("reshape", [x], shape=(6,))], shape=(3, 2))
    g = named(
        b,
        n=b.add("neg", [b.add("neg", [x])]),
        t=b.add("transpose", [x], perm=(0, 1)),
        s=b.add("reshape", [x], shape=(2, 3)),
        r=r,
    )
    out = simplify_algebra(g)
    for name in "nts":
        assert out.names[name] == out.names["x"]
    assert out.node("r").inputs == (out.names["x"],)  # reshape of a reshape reads x


def test_algebra_reads_past_explicit_broadcasts():
    b = GraphBuilder()
    x = b.input("x", ("B", 4))
    s = b.input("s", ())
    wide = b.add("broadcast_to", [b.add("reshape", [s], shape=(1,))], shape=("B", 4))
    g = named(b, y=b.add("mul", [wide, x]), keep=b.add("exp", [wide]))
    out = simplify_algebra(g)
    assert out.node("y").inputs == (out.names["s"], out.names["x"])
    assert out.node("keep").inputs != (out.names["s"],)  # exp alone would lose the shape
    leaves = {"x": np.arange(8.0).reshape(2, 4), "s": np.array(3.0)}
    np.testing.assert_allclose(value(out, "y", leaves, {"B": 2}), leaves["x"] * 3)


# -- CSE --------------------------------------------------------------------------------


def test_cse_merges_equal_nodes_but_not_distinct_leaves():
    b = GraphBuilder()
    x, z = b.input("x", (3,)), b.input("z", (3,))
    e1, e2 = b.add("exp", [x]), b.add("exp", [x])
    c1 = b.add("const", (), shape=(), value=(2.0,))
    c2 = b.add("const", (), shape=(), value=(2.0,))
    g = named(b, y=b.add("add", [b.add("mul", [e1, c1]), b.add("mul", [e2, c2])]), w=b.add("exp", [z]))
    out = eliminate_common_subexpressions(g)
    assert ops(out).count("exp") == 2 and ops(out).count("const") == 1
    assert ops(out).count("mul") == 1 and ops(out).count("input") == 2
    y = out.node("y")
    assert y.inputs[0] == y.inputs[1]


# -- dead code --------------------------------------------------------------------------


def test_dce_drops_unused_keeps_named_and_updates():
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.add("exp", [x])  # dead
    used = b.add("sin", [x])
    upd = b.add("cos", [b.add("sqrt", [x])])
    g = b.build()
    g = Graph(g.nodes, {**g.names, "s": used}, g.inputs, g.params, (), (), (("x", upd),))
    out = eliminate_dead_code(g)
    assert ops(out) == ["input", "sin", "sqrt", "cos"]
    assert out.node("s").op == "sin"
    assert out.nodes[out.updates[0][1]].op == "cos"


def test_dce_start_protects_earlier_nodes():
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.add("exp", [x])
    b.add("sin", [x])
    g = b.build()
    assert ops(eliminate_dead_code(g, start=2)) == ["input", "exp"]


# -- everything on real training steps ------------------------------------------------


@pytest.mark.parametrize(
    "sample,opt", [("quadratic", dlc.SGD(0.1)), ("mlp_digits", dlc.Adam(0.01)), ("linear", dlc.Adadelta())]
)
def test_simplify_keeps_every_value_of_a_training_step(sample, opt, monkeypatch):
    from dlc.compiler import train_graph

    model = dlc.compile(f"samples/{sample}.dl")
    raw = _unsimplified(model.graph, opt, monkeypatch, train_graph)
    done = simplify(raw)
    check_graph(raw)
    check_graph(done)
    assert len(done.nodes) < len(raw.nodes)
    rng = np.random.default_rng(0)
    leaves = {}
    for name in raw.inputs:
        shape = tuple(4 if isinstance(d, str) else d for d in raw.shape(name))
        leaves[name] = rng.integers(0, 10, size=shape).astype(float) if name == "labels" else rng.normal(size=shape)
    for name in (*raw.params, *raw.states):
        leaves[name] = rng.normal(size=raw.shape(name))
    dims = {"B": 4}
    before = evaluate(raw, [i for _, i in raw.updates] + list(raw.names.values()), leaves, dims, np.float64)
    after = evaluate(done, [i for _, i in done.updates] + list(done.names.values()), leaves, dims, np.float64)
    for name, i in raw.names.items():
        np.testing.assert_allclose(after[done.names[name]], before[i], rtol=1e-12, err_msg=name)
    assert [n for n, _ in raw.updates] == [n for n, _ in done.updates]
    for (name, i), (_, j) in zip(raw.updates, done.updates):
        np.testing.assert_allclose(after[j], before[i], rtol=1e-12, err_msg=name)


def _unsimplified(graph, opt, monkeypatch, train_graph):
    monkeypatch.setattr(train_graph, "simplify", lambda g: g)
    return build_train_graph(graph, None, opt)


# -- fold_matmul_layouts ------------------------------------------------------------------


def _leaves(g: Graph, rng, dims):
    from dlc.runtime.dims import bind

    return {
        g.nodes[g.names[n]].attr("name"): rng.standard_normal(bind(g.nodes[g.names[n]].shape, dims)) for n in g.inputs
    }


def test_fold_matmul_layouts_reads_transposed_operands_in_place():
    b = GraphBuilder()
    x = b.input("x", ("B", 5, 3))
    x2 = b.input("x2", (5, 3))
    w = b.input("w", (4, 3))  # PyTorch's [out, in]
    k = b.input("k", ("B", 6, 3))
    wt = b.add("transpose", [w], perm=(1, 0))
    y2 = b.add("matmul", [x2, wt])
    y = b.add("matmul", [x, wt])  # a weight under batched rows: read as transposed, kept
    s = b.add("matmul", [b.add("transpose", [k], perm=(0, 2, 1)), b.add("transpose", [x], perm=(0, 2, 1))], ta=True)
    g = named(b, y=y, y2=y2, s=s)
    out = simplify(g)
    assert ops(out).count("transpose") == 1
    assert out.nodes[out.names["y2"]].attrs == (("ta", False), ("tb", True))
    assert out.nodes[out.nodes[out.names["y"]].inputs[1]].op == "transpose"
    assert out.nodes[out.names["s"]].attrs == (("ta", False), ("tb", True))
    dims = {"B": 2}
    leaves = _leaves(g, np.random.default_rng(0), dims)
    for name in ("y", "y2", "s"):
        np.testing.assert_allclose(value(out, name, leaves, dims), value(g, name, leaves, dims), rtol=1e-12)


def test_fold_matmul_layouts_transposes_a_product_by_swapping_it():
    b = GraphBuilder()
    a, c = b.input("a", (5, 3)), b.input("c", (3, 4))
    p = b.add("matmul", [a, c])
    g = named(b, t=b.add("transpose", [p], perm=(1, 0)))
    out = simplify(g)
    assert ops(out) == ["input", "input", "matmul"]
    n = out.nodes[out.names["t"]]
    assert n.inputs == (out.names["c"], out.names["a"]) and n.attrs == (("ta", True), ("tb", True))
    leaves = _leaves(g, np.random.default_rng(1), {})
    np.testing.assert_allclose(value(out, "t", leaves), value(g, "t", leaves), rtol=1e-12)


def test_fold_matmul_layouts_keeps_a_product_read_elsewhere():
    b = GraphBuilder()
    a, c = b.input("a", (5, 3)), b.input("c", (3, 4))
    p = b.add("matmul", [a, c])
    g = named(b, p=p, t=b.add("transpose", [p], perm=(1, 0)))
    assert ops(simplify(g)).count("matmul") == 1  # not computed twice


def test_fold_matmul_layouts_folds_a_batch_sum_into_k():
    # a weight gradient: sum over B of X_b^T G_b is one product over B*T rows
    b = GraphBuilder()
    x, gr = b.input("x", ("B", "T", 3)), b.input("g", ("B", "T", 4))
    p = b.add("matmul", [x, gr], ta=True)
    g = named(b, dw=b.add("sum", [p], axes=(0,), keepdims=False))
    out = simplify(g)
    assert "sum" not in ops(out)
    n = out.nodes[out.names["dw"]]
    assert n.op == "matmul" and [out.nodes[i].shape for i in n.inputs] == [("B*T", 3), ("B*T", 4)]
    dims = {"B": 3, "T": 5}
    leaves = _leaves(g, np.random.default_rng(2), dims)
    np.testing.assert_allclose(value(out, "dw", leaves, dims), value(g, "dw", leaves, dims), rtol=1e-12)


def test_fold_matmul_layouts_leaves_sums_it_cannot_fold():
    b = GraphBuilder()
    x, gr, w = b.input("x", ("B", 3, "T")), b.input("g", ("B", "T", 4)), b.input("w", ("T", 4))
    not_t = b.add("sum", [b.add("matmul", [x, gr])], axes=(0,), keepdims=False)  # A's batch is not outer to K
    xt = b.add("transpose", [x], perm=(0, 2, 1))
    shared = b.add("sum", [b.add("matmul", [xt, w], ta=True)], axes=(0,), keepdims=False)  # w broadcast
    g = named(b, a=not_t, s=shared)
    assert ops(simplify(g)).count("sum") == 2
