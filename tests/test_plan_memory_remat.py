"""Rematerialization (compiler/remat.py) and the kernel order (compiler/fusion.py): the backward
reads its own copies of cheap forward values, which changes no value (the NumPy reference of
the step with and without the copies agrees bit for bit), and the forward's originals then die
in the forward pass; dropout masks are redrawn where read, never stored."""

from __future__ import annotations

import numpy as np

import dlc
from dlc.compiler.fusion import fuse
from dlc.compiler.ir import cone
from dlc.compiler.plan import plan
from dlc.compiler.reference import evaluate
from dlc.compiler.remat import backward_start, rematerialize
from dlc.compiler.simplify import PASSES
from dlc.compiler.train_graph import add_optimizer, gradients_for

MODEL = """
input x: [B, 8]
input t: [B, 8]
param ln.weight: [8] = ones
param W1: [8, 32] = normal(0, 0.3)
param W2: [32, 8] = normal(0, 0.3)
h = layer_norm(x, ln.weight, zeros([8]))
a = gelu(h @ W1)
y = x + dropout(a @ W2, 0.25)
loss cost = mean_squared(y, t)
"""


def step_graphs():
    """The training step simplified without the copies, and with them."""
    model = dlc.compile(MODEL)
    loss, with_grads, trained = gradients_for(model.graph, None)
    g = add_optimizer(model.graph, loss, with_grads, trained, dlc.AdamW(0.01, clip_norm=1.0))
    for _ in range(8):
        before = g.nodes
        for p in PASSES:
            g = p(g)
        if g.nodes == before:
            break
    return g, rematerialize(g)


def by_name(g):
    return {g.label(i): i for i in range(len(g.nodes))}


def test_copies_change_no_value():
    plain, copied = step_graphs()
    assert len(copied.nodes) > len(plain.nodes)  # layer_norm and gelu copied for the backward
    rng = np.random.default_rng(0)
    leaves = {
        "x": rng.normal(size=(5, 8)),
        "t": rng.normal(size=(5, 8)),
        "ln.weight": 1 + 0.1 * rng.normal(size=8),
        "W1": 0.3 * rng.normal(size=(8, 32)),
        "W2": 0.3 * rng.normal(size=(32, 8)),
        "$lr": np.float32(0.01),
    }
    for g in (plain, copied):
        for name in g.states:
            leaves.setdefault(name, np.zeros(g.node(name).shape) if name != "$seed" else np.float32(7))
    results = []
    for g in (plain, copied):
        roots = [g.names[g.losses[0]], *(u for _, u in g.updates)]
        values = evaluate(g, roots, leaves, {"B": 5})
        results.append([values[r] for r in roots])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_forward_values_the_backward_copies_die_in_the_forward():
    plain, g = step_graphs()
    for graph, kept in ((plain, True), (g, False)):
        boundary = backward_start(graph)
        late_readers = {j for i in range(boundary + 1, len(graph.nodes)) for j in graph.nodes[i].inputs}
        names = by_name(graph)
        for name in ("h", "a"):  # layer_norm's output and gelu's: recomputed for the weight gradients
            assert (names[name] in late_readers) == kept, name
    boundary = backward_start(g)
    ops = [g.nodes[i].op for i in range(boundary + 1, len(g.nodes))]
    assert "layer_norm" in ops and "gelu" in ops
    f = fuse(g, [g.names[g.losses[0]]], g.updates)
    p = plan(f, {"B": 64})
    loss_kernel = f.producer[g.names[g.losses[0]]]
    across = [t for t, (first, last) in p.live.items() if first < loss_kernel < last]
    assert across  # the pre-activation, which gelu's gradient reads
    for t in across:  # kept from the forward to the backward: no layer_norm, gelu or dropout mask
        assert g.nodes[t].op not in ("layer_norm", "gelu", "random_uniform", "ge"), g.label(t)


def test_a_dropout_mask_is_never_stored():
    _, g = step_graphs()
    f = fuse(g, [g.names[g.losses[0]]], g.updates)
    assert any(n.op == "random_uniform" for n in g.nodes)
    for k in f.kernels:
        for o in k.outputs:
            leaves = [g.nodes[j] for j in cone(g, [o]) if g.nodes[j].is_leaf]
            made_of_scalars = all(n.shape == () for n in leaves)
            assert g.nodes[o].shape == () or not made_of_scalars, g.label(o)  # a mask: redrawn where read
