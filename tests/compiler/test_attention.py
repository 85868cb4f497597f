"""attention(q, k, v, causal, scale): the language function, the written-out pattern the
compiler rewrites into it (and the ones it must leave alone), and the NumPy reference against
PyTorch's scaled_dot_product_attention, NaN at masked positions included. (Gradients: the
registry sweep in test_gradients.py; GL: tests/gl/test_registry_gl.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.compiler.autodiff import differentiate, grad_name
from dlc.compiler.ir import cone
from dlc.compiler.modes import eval_form, training_form
from dlc.compiler.simplify import simplify

ROOT = Path(__file__).resolve().parents[2]
HEADS = """
input q: [B, 2, T, 4]
input k: [B, 2, T, 4]
input v: [B, 2, T, 4]
"""


def ops(source: str) -> list[str]:
    return [n.op for n in dlc.compile(source).graph.nodes]


def sdpa(q, k, v, causal, scale=None):
    torch = pytest.importorskip("torch")
    t = [torch.tensor(x, dtype=torch.float64) for x in (q, k, v)]
    return torch.nn.functional.scaled_dot_product_attention(*t, is_causal=causal, scale=scale).numpy()


@pytest.mark.parametrize("causal", [False, True])
def test_function_matches_pytorch(causal):
    rng = np.random.default_rng(0)
    f = {n: rng.normal(size=(3, 2, 7, 4)).astype(np.float32) for n in "qkv"}
    src = HEADS + f"y = attention(q, k, v, causal={str(causal).lower()})\nz = attention(q, k, v, scale=0.3)\n"
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    np.testing.assert_allclose(sess.eval("y", f), sdpa(f["q"], f["k"], f["v"], causal), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.eval("z", f), sdpa(f["q"], f["k"], f["v"], False, 0.3), rtol=1e-5, atol=1e-6)


def test_causal_rows_do_not_see_later_nan():
    """A NaN at key position j (in k or v) reaches only the query rows that attend to j."""
    rng = np.random.default_rng(1)
    f = {n: rng.normal(size=(1, 2, 6, 4)).astype(np.float32) for n in "qkv"}
    f["v"][0, 1, 4, 2] = np.nan
    f["k"][0, 0, 3, 1] = np.nan
    sess = dlc.Session(dlc.compile(HEADS + "y = attention(q, k, v, causal=true)\n"), backend="numpy")
    y = sess.eval("y", f)
    assert np.isfinite(y[0, 1, :4]).all() and np.isnan(y[0, 1, 4:, 2]).all()
    assert np.isfinite(y[0, 0, :3]).all() and np.isnan(y[0, 0, 3:]).all()
    clean = {n: x[:, :, :3] for n, x in f.items()}
    np.testing.assert_allclose(y[:, 0, :3], sdpa(clean["q"], clean["k"], clean["v"], True)[:, 0], rtol=1e-5)


@pytest.mark.parametrize(
    "src, want",
    [
        ("p = softmax(where(tril(ones([T, T])), q @ transpose(k, [0, 1, 3, 2]) / sqrt(4), -inf))", (True, 0.5)),
        ("p = softmax(q @ transpose(k, [0, 1, 3, 2]) * 0.25)", (False, 0.25)),
        ("p = softmax(0.25 * (q @ transpose(k, [0, 1, 3, 2])))", (False, 0.25)),
        ("p = softmax(where(tril(ones([T, T])), q @ transpose(k, [0, 1, 3, 2]), -inf))", (True, 1.0)),
    ],
)
def test_written_out_attention_becomes_the_fused_op(src, want):
    model = dlc.compile(HEADS + src + "\ny = p @ v\n")
    g = model.graph
    node = g.nodes[g.names["y"]]
    assert node.op == "attention"
    assert (node.attr("causal"), node.attr("scale")) == want
    rng = np.random.default_rng(2)
    f = {n: rng.normal(size=(2, 2, 5, 4)).astype(np.float32) for n in "qkv"}
    y = dlc.Session(model, backend="numpy").eval("y", f)
    np.testing.assert_allclose(y, sdpa(f["q"], f["k"], f["v"], *want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "src",
    [
        "p = softmax(where(triu(ones([4, 4])), q @ transpose(k, [0, 1, 3, 2]), -inf))",  # not causal: triu
        "p = softmax(where(tril(ones([4, 4])), q @ transpose(k, [0, 1, 3, 2]), 0))",  # filled with 0
        "p = softmax(q @ transpose(k, [0, 1, 3, 2]) * s)",  # a scale that is data
        "p = softmax(q @ transpose(k, [0, 1, 3, 2]), axis=2)",  # over the queries
        "p = softmax(q @ transpose(k, [0, 1, 2, 3]))",  # not k^T (T x T only by a 4 x 4 head)
        "p = relu(softmax(q @ transpose(k, [0, 1, 3, 2])))",  # something between softmax and @ v
    ],
)
def test_other_forms_are_left_alone(src):
    head = "input q: [B, 2, 4, 4]\ninput k: [B, 2, 4, 4]\ninput v: [B, 2, 4, 4]\ninput s: []\n"
    assert "attention" not in ops(head + src + "\ny = p @ v\n")


def test_char_gpt_trains_through_the_fused_op():
    """samples/char_gpt.dl, unedited: every layer's attention is the fused op, with its
    dropout in the training form (tests/compiler/test_attention_dropout.py), and the
    training step has no T x T tensor (only the named probabilities would, when fetched)."""
    model = dlc.compile(ROOT / "samples" / "char_gpt.dl")
    train = training_form(model.graph)
    dropping = [n for n in train.nodes if n.op == "attention" and n.attr("dropout") is not None]
    evaluated = simplify(eval_form(model.graph))  # eval: the attention without dropout, no random draw
    assert len(dropping) == 6 and ops_count(evaluated, "attention") == 6
    assert not [n for n in evaluated.nodes if n.attr("dropout") is not None or n.op == "random_uniform"]
    g = simplify(differentiate(train, "loss")[0])
    grads = [g.names[grad_name(p)] for p in model.graph.params]
    live = [g.nodes[i] for i in cone(g, grads)]
    assert not [n for n in live if n.shape[-2:] == ("T", "T")]
    # a gradient wrt q and one wrt k and v together a layer (simplify's pack_kv_grads)
    assert ops_count(g, "attention_grad") == 12
    assert sorted(n.attr("wrt") for n in g.nodes if n.op == "attention_grad") == ["kv"] * 6 + ["q"] * 6
    assert all(n.attr("dropout") is not None for n in g.nodes if n.op == "attention_grad")
    # each forward and the row statistics its gradient saves: one node (simplify's pack_attention)
    assert ops_count(g, "attention_packed") == 6 and ops_count(g, "attention_lse") == ops_count(g, "attention") == 0


@pytest.mark.parametrize("d, packed", [(64, True), (8, True), (68, False), (5, False)])
def test_k_and_v_gradients_pack_for_the_heads_the_tiled_kernel_takes(d, packed):
    """pack_kv_grads computes dk and dv as one node only for heads of vec4 words up to 64
    (ops/attention.py KV_PACKED_MAX); others keep a node each, as their row kernels measured
    faster that way."""
    src = "\n".join(f"input {n}: [2, T, {d}]" for n in "qkvr")
    g = dlc.compile(src + "\ny = attention(q, k, v, causal=true)\nloss l = sum(y * r)\n").graph
    g = simplify(differentiate(g, "l", ["q", "k", "v"])[0])
    want = ["kv", "q"] if packed else ["k", "q", "v"]
    assert sorted(n.attr("wrt") for n in g.nodes if n.op == "attention_grad") == want


@pytest.mark.parametrize(
    "tiling, message",
    [
        ({"own": 30}, "own a multiple of 4"),
        ({"stream": 32, "block": 3}, "stream a multiple of block"),
        ({"own": 0}, "positive integers"),
        ({"wrt": ["x"]}, "among q, k, v, kv"),
        ({"lanes": 64}, "no field ['lanes']"),
        ({"own": 128, "stream": 64, "block": 1}, "at most 1024 invocations"),
    ],
)
def test_a_bad_attention_tiling_option_is_named(tiling, message):
    from dlc.compiler.codegen.kernels_attention_tiled import tiling_of
    from dlc.compiler.codegen.options import codegen_options

    with pytest.raises(ValueError, match=re.escape(message)):
        tiling_of(codegen_options({"attention_tiled": tiling}))


def ops_count(g, op: str) -> int:
    return sum(n.op == op for n in g.nodes)


@pytest.mark.parametrize(
    "call, message",
    [
        ("attention(q, k, w)", "attention's v \\[B, 2, T, 3\\] must have q's shape"),
        ("attention(q, k, v, scale=inf)", "scale must be finite"),
        ("attention(x, x, x)", "a number from 1 to 128"),
        ("attention(s, s, s)", "operands are \\[..., T, D\\]"),
    ],
)
def test_bad_operands_are_located_errors(call, message):
    src = HEADS + "input w: [B, 2, T, 3]\ninput x: [2, 129]\ninput s: [4]\ny = " + call + "\n"
    with pytest.raises(dlc.CompileError, match=message) as info:
        dlc.compile(src)
    assert ":8:" in str(info.value) or "line 8" in str(info.value)


def test_packing_the_forward_with_its_statistics_keeps_the_gradients():
    """simplify computes attention and the gradient's attention_lse as one attention_packed
    node; the gradients are those of the two nodes apart (float64 reference)."""
    from dlc.compiler.reference import evaluate

    src = HEADS + "input r: [B, 2, T, 4]\ny = attention(q, k, v, causal=true)\nloss l = sum(y * r)\n"
    g, grads = differentiate(dlc.compile(src).graph, "l", ["q", "k", "v"])
    assert ops_count(g, "attention_lse") == 1 and ops_count(g, "attention_packed") == 0
    packed = simplify(g)
    assert ops_count(packed, "attention_packed") == 1 and ops_count(packed, "attention_lse") == 0
    rng = np.random.default_rng(3)
    feeds = {n: rng.normal(size=(2, 2, 9, 4)) for n in "qkvr"}
    dims = {"B": 2, "T": 9}
    names = [grad_name(n) for n in "qkv"]
    want = evaluate(g, [g.names[n] for n in names], feeds, dims, np.float64)
    got = evaluate(packed, [packed.names[n] for n in names], feeds, dims, np.float64)
    for n in names:
        np.testing.assert_allclose(got[packed.names[n]], want[g.names[n]], rtol=1e-12, err_msg=n)
