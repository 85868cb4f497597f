"""Fusion: which IR lands in which kernel (no GL needed)."""

from __future__ import annotations

import pytest

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.fusion import bound, fuse
from dlc.compiler.lang import compile_source
from dlc.compiler.limits import capabilities
from dlc.compiler.train_graph import build_train_graph
from dlc.runtime.optimizers import SGD, Adam

# The storage blocks NVIDIA and Mesa give a compute shader (the spec minimum is 8).
WIDE = capabilities("compute", {"max_compute_ssbo_blocks": 16, "max_ssbo_bindings": 16})


def fused(source: str, *names: str):
    g = compile_source(source, "t.dl")
    return fuse(g, [g.names[n] for n in names])


def test_relu_of_matmul_plus_bias_is_one_kernel():
    f = fused("input x: [B, 5]\nparam W: [5, 3]\nparam b: [3]\ny = relu(x @ W + b)\n", "y")
    assert len(f.kernels) == 1
    (k,) = f.kernels
    assert k.kind == "matmul"
    assert [f.graph.nodes[n].op for n in k.nodes] == ["matmul", "add", "relu"]
    assert k.name == "k00_matmul_add_relu"


def test_chain_of_ten_elementwise_ops_is_one_kernel():
    f = fused("input x: [B, 7]\ninput z: [7]\ny = exp(sigmoid(tanh(abs(-(x * z + 1) / 2) - 3) ^ 2) * 0.5)\n", "y")
    assert len(f.kernels) == 1
    ops = [f.graph.nodes[n].op for n in f.kernels[0].nodes]
    assert len([o for o in ops if o != "const"]) >= 10
    assert f.kernels[0].kind == "elementwise"


def test_reduction_takes_its_producers_and_consumers():
    # mean(exp(x) * 2) is sum(exp(x) * 2) / n: one kernel, prologue and epilogue
    f = fused("input x: [B, 9]\ny = mean(exp(x) * 2)\n", "y")
    assert len(f.kernels) == 1
    assert f.kernels[0].kind == "reduce"
    assert {"exp", "mul", "sum", "dim_size", "div"} <= {f.graph.nodes[n].op for n in f.kernels[0].nodes}


def test_matmul_operands_are_stored_and_window_ops_are_their_own_kernels():
    f = fused("input x: [B, 4]\nparam W: [4, 4]\ny = (x + 1) @ W\n", "y")
    assert [k.kind for k in f.kernels] == ["elementwise", "matmul"]
    f = fused(
        "input x: [B, 6, 6, 2]\nparam w: [3, 3, 2, 4]\nparam b: [4]\ny = max_pool(relu(conv2d(x, w) + b), 2)\n", "y"
    )
    assert [k.kind for k in f.kernels] == ["window", "window"]  # conv+bias+relu, then pool


def test_a_value_read_by_two_kernels_is_stored_once():
    f = fused("input x: [B, 4]\ne = exp(x)\ny = e / sum(e, axis=1, keepdims=true)\n", "y")
    stored = [o for k in f.kernels for o in k.outputs]
    assert len(stored) == len(set(stored))
    assert len(f.kernels) == 3  # e; the row sums (with exp as prologue would read e); the div


def test_fetches_inside_a_kernel_become_extra_outputs():
    f = fused("input x: [B, 4]\na = x * 2\ny = a + 1\n", "a", "y")
    assert len(f.kernels) == 1
    g = f.graph
    assert set(f.kernels[0].outputs) == {g.names["a"], g.names["y"]}


def test_activation_read_by_backward_pass_is_written_by_the_matmul_kernel():
    g = compile_source(
        "input x: [B, 5]\ninput t: [B, 3]\nparam W: [5, 3]\nparam b: [3]\n"
        "h = relu(x @ W + b)\nloss l = mean_squared(h, t)\n",
        "t.dl",
    )
    step = build_train_graph(g, "l", SGD(0.1))
    f = fuse(step, [step.names["l"]], step.updates, caps=WIDE)
    first = f.kernels[0]
    pre = step.nodes[step.names["h"]].inputs[0]  # x @ W + b, which relu's gradient reads
    ops = {step.nodes[n].op for n in first.nodes}
    # forward and the elementwise backward in one kernel; what only it reads stays inside
    assert first.kind == "matmul" and {"relu", "step", "sub"} <= ops
    assert pre not in first.outputs and step.names["h"] not in first.outputs
    # every update is written in place into its param
    from dlc.compiler.plan import plan

    p = plan(f, {"B": 8})
    assert not p.copies and len(p.inplace) == 2


def test_adam_updates_fuse_into_the_gradient_kernels():
    g = compile_source(
        "input x: [B, 5]\ninput t: [B, 3]\nparam W: [5, 3]\nparam b: [3]\nloss l = mean_squared(x @ W + b, t)\n", "t.dl"
    )
    step = build_train_graph(g, "l", Adam(0.01))
    f = fuse(step, [step.names["l"]], step.updates, caps=WIDE)
    names = step.names
    by_output = {o: k for k in f.kernels for o in k.outputs}
    upd = dict(step.updates)
    # W, W$m, W$v come out of the kernel that computes grad$W (the matmul), likewise b
    for p in ("W", "b"):
        k = by_output[upd[p]]
        assert by_output[upd[p + "$m"]] is k and by_output[upd[p + "$v"]] is k
        assert names["grad$" + p] in k.nodes
    # Adam's scalar bias corrections are recomputed inside, not kernels of their own
    assert sum(1 for k in f.kernels if k.shape == ()) <= 2  # the loss and the step counter


def test_schedule_is_topological_and_every_kernel_reads_only_earlier_outputs():
    g = compile_source(open("samples/mlp_digits.dl").read(), "mlp.dl")
    step = build_train_graph(g, "cost", Adam(0.01))
    f = fuse(step, [step.names["cost"]], step.updates)
    made: dict[int, int] = {}
    for k in f.kernels:
        for i in k.inputs:
            b = f.base(i)
            if f.storage[b] == "kernel":
                assert made[b] < k.index
        for o in k.outputs:
            made[o] = k.index


def test_reshape_to_a_matmul_is_a_view():
    b = GraphBuilder()
    x = b.input("x", ("B", 2, 3))
    w = b.param("w", (6, 4), ("zeros",))
    r = b.add("reshape", [x], shape=("B", 6))
    y = b.add("matmul", [r, w], ta=False, tb=False)
    f = fuse(b.build(), [y])
    assert f.alias == {r: x}
    assert len(f.kernels) == 1 and set(f.kernels[0].inputs) == {w, r}


@pytest.mark.parametrize("src", ["input x: [3]\ny = x\n", "param p: [2, 2] = ones\ny = p\n"])
def test_fetching_a_leaf_needs_no_kernel(src):
    f = fused(src, "y")
    assert f.kernels == ()


def test_no_kernel_binds_more_than_the_buffer_limit():
    n = 40
    src = "".join(f"input x{i}: [B]\n" for i in range(n)) + "y = " + " + ".join(f"x{i}" for i in range(n)) + "\n"
    g = compile_source(src)
    f = fuse(g, [g.names["y"]])
    assert len(f.kernels) > 1
    for k in f.kernels:
        assert bound(f, k, COMPUTE) <= COMPUTE.budget(k.kind), k.name


def test_a_cut_stays_out_of_the_kernel_it_was_cut_from():
    # A bias read at each of 8 unrolled steps: its gradient sums 8 partials, then Adam updates
    # it and its two slots. Fused into the reduction of the last partial, that kernel binds
    # more buffers than allowed; the value cut out to fix it must not be folded back in.
    src = """
input x: [B, 8, 4]
input y: [B, 4]
param b: [4]
h = reshape(slice(x, [0, 0, 0], [-1, 1, -1]), [-1, 4])
for t in range(8) {
    h = tanh(h + b + reshape(slice(x, [0, t, 0], [-1, 1, -1]), [-1, 4]))
}
loss l = mean_squared(h, y)
"""
    step = build_train_graph(compile_source(src, "t.dl"), "l", Adam(0.01))
    f = fuse(step, [step.names["l"]], step.updates, COMPUTE)
    for k in f.kernels:
        assert len({f.base(i) for i in k.inputs} | set(k.outputs)) <= COMPUTE.max_bindings, k.name


COMPUTE = capabilities("compute")  # at the spec minimums
ONE_OUTPUT = capabilities("texture")  # a fragment writes one result


def test_a_target_writing_one_result_a_kernel_stores_fetches_in_kernels_of_their_own():
    g = compile_source("input x: [B, 4]\na = x * 2\ny = a + 1\ns = sum(a)\nm = s * 3\n", "t.dl")
    names = [g.names[n] for n in ("a", "y", "s", "m")]
    several = fuse(g, names)
    one = fuse(g, names, caps=ONE_OUTPUT)
    assert any(len(k.outputs) > 1 for k in several.kernels)
    assert all(len(k.outputs) == 1 for k in one.kernels)
    # each fetch is written once, and a kernel reads the stored value instead of recomputing it
    assert sorted(o for k in one.kernels for o in k.outputs) == sorted(names)
    y_kernel = next(k for k in one.kernels if k.outputs == (g.names["y"],))
    assert g.names["a"] in y_kernel.inputs and g.names["a"] not in y_kernel.nodes


def test_a_target_writing_one_result_a_kernel_splits_optimizer_updates():
    g = compile_source(
        "input x: [B, 5]\ninput t: [B, 3]\nparam W: [5, 3]\nparam b: [3]\nloss l = mean_squared(x @ W + b, t)\n", "t.dl"
    )
    step = build_train_graph(g, "l", Adam(0.01))
    f = fuse(step, [step.names["l"]], step.updates, caps=ONE_OUTPUT)
    assert all(len(k.outputs) == 1 for k in f.kernels)
    written = {o for k in f.kernels for o in k.outputs}
    assert {i for _, i in step.updates} <= written
    # the schedule still lets every kernel read only what earlier kernels wrote
    made = {o: k.index for k in f.kernels for o in k.outputs}
    for k in f.kernels:
        assert all(made[f.base(i)] < k.index for i in k.inputs if f.base(i) in made)


def test_an_op_s_stored_inputs_are_stored_not_recomputed_in_its_kernel():
    # attention_cached reads its keys and values whole in every work group: a value made for
    # it (here the cache times 2) is stored by a kernel of its own (the registry's
    # stored_inputs), while the same value as its query is recomputed inside
    b = GraphBuilder()
    q, cache, pos = b.input("q", (2, 3, 1, 8)), b.input("cache", (2, 2, 3, 16, 8)), b.input("pos", (1,), dtype="i32")
    kv = b.add("mul", [cache, b.const(2.0)])
    q2 = b.add("mul", [q, b.const(2.0)])
    y = b.add("attention_cached", [q2, kv, pos], scale=0.3)
    g = b.build()
    f = fuse(g, [y])
    (attn,) = [k for k in f.kernels if y in k.nodes]
    assert kv not in attn.nodes and f.storage[kv] == "kernel"
    assert q2 in attn.nodes
