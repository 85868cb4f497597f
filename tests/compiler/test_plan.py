"""The storage plan: liveness, slot reuse, in-place updates (no GL needed)."""

from __future__ import annotations

import pytest
from random_graphs import random_graph

from dlc.compiler.codegen import render
from dlc.compiler.fusion import fuse
from dlc.compiler.lang import compile_source
from dlc.compiler.plan import eval_size, format_plan, plan, readers_by_kernel, size_of
from dlc.compiler.train_graph import build_train_graph
from dlc.runtime.optimizers import Adam


def check_plan(p) -> None:
    f = p.fusion
    g = f.graph
    end = len(f.kernels)
    readers = readers_by_kernel(f)
    for k in f.kernels:
        for t in (*k.inputs, *k.outputs):
            assert t in p.slot_of, f"tensor %{t} of {k.name} has no slot"
    # live ranges cover every read, and fetches live to the end
    for t, (lo, hi) in p.live.items():
        assert lo == f.producer[t]
        assert all(lo < r <= hi for r in readers.get(t, []))
        if t in {f.base(r) for r in f.roots}:
            assert hi == end
    # the property: no slot holds two temporaries that are live at once
    temps = sorted(p.live)
    for i, a in enumerate(temps):
        for b in temps[i + 1 :]:
            if p.slot_of[a] == p.slot_of[b]:
                (a0, a1), (b0, b1) = p.live[a], p.live[b]
                assert a1 < b0 or b1 < a0, f"%{a} {p.live[a]} and %{b} {p.live[b]} share a slot"
    # a slot is big enough for each of its tensors
    for t, s in p.slot_of.items():
        slot = p.slots[s]
        if slot.kind == "temp":
            assert size_of(g.nodes[t].shape) in slot.sizes
    # in-place updates: nothing after the writer reads the old value
    for target, u in p.inplace:
        leaf = g.names[target]
        assert all(r <= f.producer[u] for r in readers.get(leaf, []))
        assert p.slot_of[u] == p.slot_of[leaf]
    peak = p.peak_bytes()
    assert peak["planned"] <= peak["no_reuse"]


@pytest.mark.parametrize("seed", range(60))
def test_plan_never_shares_a_slot_between_live_tensors(seed):
    g, roots = random_graph(seed)
    f = fuse(g, roots, g.updates)
    p = plan(f, {"B": 5})
    check_plan(p)
    render(p)  # every kernel renders


def test_reuse_lowers_the_peak_of_a_training_step():
    g = compile_source(open("samples/mlp_digits.dl").read(), "mlp.dl")
    step = build_train_graph(g, "cost", Adam(0.01))
    p = plan(fuse(step, [step.names["cost"]], step.updates), {"B": 64})
    check_plan(p)
    peak = p.peak_bytes()
    assert peak["planned"] < peak["no_reuse"]
    assert not p.copies  # every update written in place
    text = format_plan(p)
    assert "peak temporaries:" in text and "with no reuse" in text
    assert "s0   input pixels" in text


def test_a_deep_chain_needs_two_slots():
    lines = ["input x: [B, 16]"] + [
        f"param W{k}: [16, 16]\nh{k} = relu({'x' if k == 0 else f'h{k - 1}'} @ W{k})" for k in range(6)
    ]
    g = compile_source("\n".join(lines) + "\n", "deep.dl")
    p = plan(fuse(g, [g.names["h5"]]), {"B": 10})
    check_plan(p)
    peak = p.peak_bytes()
    assert peak["no_reuse"] == 6 * 4 * 160
    assert peak["planned"] == 2 * 4 * 160  # activations ping-pong between two slots


def test_slot_sizes_follow_the_binding():
    g = compile_source("input x: [B, 3]\ny = relu(x) * 2\nz = sum(y, axis=1)\n", "t.dl")
    p = plan(fuse(g, [g.names["z"]]), {"B": 4})
    temps = [s for s in p.slots if s.kind == "temp"]
    assert all(z[1:] == ("B",) for s in temps for z in s.sizes)
    assert p.slot_bytes(temps[0], {"B": 1000}) == 4 * max(eval_size(z, {"B": 1000}) for z in temps[0].sizes)


def test_an_update_another_kernel_still_reads_goes_through_a_copy():
    # w's new value is computed before a later kernel reads the old w: no in-place write
    from dlc.compiler.builder import GraphBuilder
    from dlc.compiler.ir import Graph

    b = GraphBuilder()
    x = b.input("x", (3, 4))
    w = b.param("w", (4, 4), ("zeros",))
    neww = b.add("add", [w, b.add("matmul", [x, x], ta=True, tb=False)])  # kernel 0
    y = b.add("matmul", [x, w], ta=False, tb=False)  # reads the old w, scheduled after
    g0 = b.build()
    g = Graph(g0.nodes, g0.names, g0.inputs, g0.params, (), (), (("w", neww),))
    p = plan(fuse(g, [y], g.updates))
    check_plan(p)
    f = p.fusion
    if f.producer[neww] < f.producer[f.base(y)]:
        assert p.copies == (("w", neww),)
