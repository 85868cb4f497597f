"""Dropout on the attention probabilities inside the fused attention (NumPy reference):
`dropout(softmax(...), p) @ v` becomes training(attention with dropout, attention); the
training form drops exactly the probabilities the written-out form drops (same seed, step
and key: the same numbers), eval drops none; the values against PyTorch fed the mask the
pure-Python hash draws (state_oracles.py), the gradients against float64 central
differences at a fixed step and against autodiff of the written-out form.
(GL: tests/gl/test_attention_dropout_gl.py.)"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from state_oracles import uniforms

import dlc
from dlc.compiler import lang
from dlc.compiler.autodiff import differentiate, grad_name
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.emit import programs
from dlc.compiler.modes import eval_form, training_form
from dlc.compiler.reference import evaluate
from dlc.compiler.simplify import simplify

P = 0.3
SCORES = {  # scale 0.5 both ways
    True: "where(tril(ones([T, T])), q @ transpose(k, [0, 1, 3, 2]) / sqrt(4), -inf)",
    False: "q @ transpose(k, [0, 1, 3, 2]) * 0.5",
}


def source(causal: bool, p: float = P) -> str:
    return (
        "input q: [B, 2, T, 4]\ninput k: [B, 2, T, 4]\ninput v: [B, 2, T, 4]\ninput r: [B, 2, T, 4]\n"
        f"y = dropout(softmax({SCORES[causal]}), {p}) @ v\nloss l = sum(y * r)\n"
    )


@contextlib.contextmanager
def written_out():
    """Models built without the attention rewrite (the oracle form)."""
    saved = lang.fuse_attention
    lang.fuse_attention = lambda g: g
    try:
        yield
    finally:
        lang.fuse_attention = saved


def graphs(causal: bool, p: float = P):
    fused = dlc.compile(source(causal, p)).graph
    with written_out():  # another source text: not the compile cache's fused graph
        plain = dlc.compile(source(causal, p) + "# written out\n").graph
    assert not any(n.op == "attention" for n in plain.nodes)
    return fused, plain


def feeds(step: float = 5.0, shape=(2, 2, 9, 4), seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {n: rng.normal(size=shape) for n in "qkvr"}
    out["$seed"], out["$step"] = np.array(1234.0), np.array(step)
    return out


DIMS = {"B": 2, "T": 9}


def value(g, name, f, dtype=np.float64):
    return evaluate(g, [g.names[name]], f, DIMS, dtype)[g.names[name]]


def test_the_rewrite_makes_a_dropout_attention_for_training_and_a_plain_one_for_eval():
    fused, plain = graphs(True)
    y = fused.nodes[fused.names["y"]]
    assert y.op == "training"
    train, ev = (fused.nodes[i] for i in y.inputs)
    (draw,) = [n for n in plain.nodes if n.op == "random_uniform"]
    assert train.op == ev.op == "attention"
    assert train.attr("dropout") == pytest.approx(P) and train.attr("key") == draw.attr("key")
    (counters,) = (fused.nodes[i] for i in train.inputs[3:])  # [$seed, $step], one tensor
    assert counters.op == "concat" and counters.shape == (2,)
    names = [fused.nodes[fused.nodes[i].inputs[0]].attr("name") for i in counters.inputs]
    assert names == ["$seed", "$step"]
    assert ev.attr("dropout") is None and len(ev.inputs) == 3
    # nothing T x T is left: the draw went with the written-out product
    assert not [n for n in fused.nodes if n.shape[-2:] == ("T", "T") and n.op not in ("iota", "broadcast_to")]


def test_dropout_of_zero_is_plain_attention():
    fused, _ = graphs(False, p=0.0)
    assert fused.nodes[fused.names["y"]].op == "attention"
    assert not [n for n in fused.nodes if n.attr("dropout") is not None]


@pytest.mark.parametrize("causal", [False, True])
def test_fused_drops_what_the_written_out_form_drops(causal):
    fused, plain = graphs(causal)
    tf, tp = training_form(fused), training_form(plain)
    for step in (0.0, 1.0, 7.0):  # a new mask each step
        f = feeds(step)
        want = value(tp, "y", f)
        # (1 / (1 - p) from p as given there, from p as float32 here: 2e-8 apart)
        np.testing.assert_allclose(value(tf, "y", f), want, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(value(tf, "y", f, np.float32), want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(value(tf, "y", feeds(0.0)), value(tf, "y", feeds(1.0)))
    # eval: no dropout, the plain attention
    f = feeds()
    np.testing.assert_allclose(value(eval_form(fused), "y", f), value(eval_form(plain), "y", f), rtol=1e-12)
    assert not np.allclose(value(eval_form(fused), "y", f), value(tf, "y", f))


def torch_dropped_attention(f, causal: bool, p: float = P):
    """PyTorch's softmax attention with the probabilities times m / (1 - p), m the mask the
    pure-Python copy of the hash draws (key 1: the model's first random op)."""
    t = {n: torch.tensor(f[n], requires_grad=True) for n in "qkv"}
    s = t["q"] @ t["k"].transpose(-1, -2) * 0.5
    n = s.shape[-1]
    if causal:
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf)
    u = uniforms(int(f["$seed"]), int(f["$step"]), 1, s.numel()).reshape(s.shape)
    p = float(np.float32(p))  # the threshold dropout compares in float32
    w = torch.tensor((u >= p) / (1.0 - p))
    y = (torch.softmax(s, -1) * w) @ t["v"]
    (y * torch.tensor(f["r"])).sum().backward()
    return y.detach().numpy(), {n: t[n].grad.numpy() for n in "qkv"}


@pytest.mark.parametrize("causal", [False, True])
def test_values_and_gradients_match_pytorch_with_the_drawn_mask(causal):
    fused, _ = graphs(causal)
    g, grads = differentiate(training_form(fused), "l", ["q", "k", "v"])
    f = feeds(3.0)
    want_y, want = torch_dropped_attention(f, causal)
    np.testing.assert_allclose(value(g, "y", f), want_y, rtol=1e-10, atol=1e-12)
    got = evaluate(g, list(grads.values()), f, DIMS, np.float64)
    for n, i in grads.items():
        np.testing.assert_allclose(got[i], want[n], rtol=1e-10, atol=1e-12, err_msg=n)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_central_differences_at_a_fixed_step(causal):
    """The mask is a function of (seed, step): fixed, the loss is smooth in q, k and v."""
    fused, plain = graphs(causal)
    g, grads = differentiate(training_form(fused), "l", ["q", "k", "v"])
    f = feeds(2.0, shape=(1, 2, 6, 4))
    dims = {"B": 1, "T": 6}
    got = evaluate(g, list(grads.values()), f, dims, np.float64)
    loss = g.names["l"]

    def at(values) -> float:
        return evaluate(g, [loss], values, dims, np.float64)[loss]

    h = 1e-6
    for n, i in grads.items():
        num = np.zeros_like(f[n])
        for idx in np.ndindex(f[n].shape):
            up, down = dict(f), dict(f)
            up[n], down[n] = f[n].copy(), f[n].copy()
            up[n][idx] += h
            down[n][idx] -= h
            num[idx] = (at(up) - at(down)) / (2 * h)
        np.testing.assert_allclose(got[i], num, rtol=1e-5, atol=1e-7, err_msg=n)
    # and autodiff of the written-out form
    gp, gradsp = differentiate(training_form(plain), "l", ["q", "k", "v"])
    want = evaluate(gp, list(gradsp.values()), f, dims, np.float64)
    for n in "qkv":
        np.testing.assert_allclose(got[grads[n]], want[gradsp[n]], rtol=1e-7, atol=1e-9, err_msg=n)


def test_training_step_packs_the_dropout_forward_with_its_statistics():
    """simplify's pack_attention pairs the dropout forward with the (dropout-free) row
    statistics its gradient saves; the gradients are unchanged."""
    fused, _ = graphs(True)
    g, _ = differentiate(training_form(fused), "l", ["q", "k", "v"])
    packed = simplify(g)
    (node,) = [n for n in packed.nodes if n.op == "attention_packed"]
    assert node.attr("dropout") == pytest.approx(P) and len(node.inputs) == 4
    assert not [n for n in packed.nodes if n.op in ("attention", "attention_lse")]
    # wrt q, and wrt k and v as one node (pack_kv_grads)
    assert sum(n.op == "attention_grad" and n.attr("dropout") is not None for n in packed.nodes) == 2
    f = feeds(4.0)
    names = [grad_name(n) for n in "qkv"]
    want = evaluate(g, [g.names[n] for n in names], f, DIMS, np.float64)
    got = evaluate(packed, [packed.names[n] for n in names], f, DIMS, np.float64)
    for n in names:
        np.testing.assert_allclose(got[packed.names[n]], want[g.names[n]], rtol=1e-12, err_msg=n)


def test_all_dropped_gives_zeros():
    fused, _ = graphs(False, p=1.0)
    np.testing.assert_array_equal(value(training_form(fused), "y", feeds()), 0.0)


@pytest.mark.parametrize(
    "inputs, attrs, message",
    [
        ("qkvc", {}, "takes 3 inputs"),
        ("qkv", {"dropout": 0.2, "key": 1}, "takes 4 inputs"),
        ("qkvc", {"dropout": 1.5, "key": 1}, "a probability in \\[0, 1\\]"),
        ("qkvs", {"dropout": 0.2, "key": 1}, "counters are \\[\\$seed, \\$step\\], \\[2\\], got \\[\\]"),
    ],
)
def test_bad_dropout_operands_are_refused(inputs, attrs, message):
    b = GraphBuilder()
    ids = {n: b.input(n, (2, 5, 4)) for n in "qkv"} | {"c": b.input("c", (2,)), "s": b.input("s", ())}
    with pytest.raises(dlc.CompileError, match=message):
        b.add("attention", [ids[n] for n in inputs], causal=False, scale=0.5, **attrs)


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_training_step_fits_the_gl_minimum_limits(target):
    """Compiled for no device in particular (an artifact: GL's minimum of 8 storage blocks a
    compute shader), a step with attention dropout fits: the counters are one input."""
    src = "param w: [4] = ones\n" + source(True)
    for n in "qkv":  # each a function of the param: all three gradients
        src = src.replace(f"input {n}: [B, 2, T, 4]\n", f"input {n}0: [B, 2, T, 4]\n{n} = {n}0 * w\n")
    compiled = programs(dlc.compile(src), target=target, train_loss="l", optimizer=dlc.SGD(0.1))
    sources = [s for p in compiled.values() for s in p.sources.values()]
    assert sum("attention_grad" in s and "dlc_random_uniform" in s for s in sources) == 2  # wrt q; wrt k and v


ARG_SOURCE = (
    "input q: [B, 2, T, 4]\ninput k: [B, 2, T, 4]\ninput v: [B, 2, T, 4]\ninput r: [B, 2, T, 4]\n"
    "y = attention(q, k, v, causal={causal}, scale=0.5, dropout={p})\n{more}loss l = sum(y * r)\n"
)


@pytest.mark.parametrize("causal", [False, True])
def test_attentions_dropout_argument_is_the_written_out_form(causal):
    """`attention(q, k, v, dropout=p)` trains and evaluates as `dropout(softmax(...), p) @ v`
    (the written-out oracle, the attention rewrite off), its values and gradients."""
    fused = dlc.compile(ARG_SOURCE.format(causal=str(causal).lower(), p=P, more="")).graph
    _, plain = graphs(causal)
    tf, tp = training_form(fused), training_form(plain)
    for step in (0.0, 3.0):
        f = feeds(step)
        np.testing.assert_allclose(value(tf, "y", f), value(tp, "y", f), rtol=1e-7, atol=1e-9)
        gf, names = differentiate(tf, "l", ["q", "k", "v"])
        gp, _ = differentiate(tp, "l", ["q", "k", "v"])
        for n in "qkv":
            got = evaluate(gf, [gf.names[grad_name(n)]], f, DIMS, np.float64)[gf.names[grad_name(n)]]
            want = evaluate(gp, [gp.names[grad_name(n)]], f, DIMS, np.float64)[gp.names[grad_name(n)]]
            np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9, err_msg=n)
    f = feeds()
    np.testing.assert_allclose(value(eval_form(fused), "y", f), value(eval_form(plain), "y", f), rtol=1e-12)


def test_attentions_dropout_takes_its_own_key_and_checks_p():
    more = "z = dropout(y, 0.5)\n"
    g = dlc.compile(ARG_SOURCE.format(causal="true", p=P, more=more).replace("sum(y * r)", "sum(z * r)")).graph
    keys = [n.attr("key") for n in g.nodes if n.attr("key") is not None]
    assert sorted(keys) == [1, 2]  # the attention's draw, then the dropout's: no shared mask
    g0 = dlc.compile(ARG_SOURCE.format(causal="true", p=0.0, more="")).graph
    assert g0.nodes[g0.names["y"]].op == "attention" and g0.nodes[g0.names["y"]].attr("dropout") is None
    with pytest.raises(dlc.DlcError, match=r"dropout is a probability in \[0, 1\], got 1.5"):
        dlc.compile(ARG_SOURCE.format(causal="true", p=1.5, more=""))
