"""Model state (`state`, `update`), batch_norm, dropout and the random ops on the NumPy
reference: against PyTorch (BatchNorm in train() and eval(), dropout fed dlc's masks, the
samples over several Adam steps), a pure-Python copy of the hash, and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from state_oracles import bits, compare_mlp_dropout, compare_resnet, drawn, random_nodes, uniforms

import dlc
from dlc.compiler.ops.random import random_bits
from dlc.runtime.errors import DataError


def digits(n: int) -> dict:
    data = dict(np.load("samples/data/digits_train.npz"))
    return {k: v[:n] for k, v in data.items()}


# -- the generator -------------------------------------------------------------------------------


def test_random_bits_match_the_integer_oracle():
    for seed, step, key in ((0, 0, 1), (12345, 7, 3), (2**24 - 1, 2**20, 99)):
        assert random_bits(seed, step, key, 50).tolist() == [bits(seed, step, key, i) for i in range(50)]


def test_random_uniform_and_normal_draws():
    sess = dlc.Session("u = random_uniform([100, 40])\nz = random_normal([100, 40])\n", backend="numpy", seed=5)
    u, z = sess.eval("u"), sess.eval("z")
    np.testing.assert_array_equal(u.ravel(), uniforms(5, 0, 1, 4000))  # the first random op has key 1
    assert (u >= 0).all() and (u < 1).all() and (u * 2**24 == np.round(u * 2**24)).all()
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 1 / 12) < 0.005
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05 and np.isfinite(z).all()


def test_draws_follow_the_step_and_the_seed_and_eval_is_deterministic():
    src = "input x: [B, 3]\nparam w: [3] = ones\nd = dropout(x * w, 0.5)\nloss l = sum(d)\n"
    x = np.ones((4, 3), np.float32)
    a = dlc.Session(src, backend="numpy", seed=1)
    first = a.eval("d", {"x": x})
    np.testing.assert_array_equal(first, x)  # eval: dropout is the identity
    (node,) = random_nodes(a.model.graph)
    u0 = drawn(a, node, {"B": 4})
    np.testing.assert_array_equal(drawn(a, node, {"B": 4}), u0)
    a.train({"x": x}, optimizer=dlc.SGD(0.0), steps=1, batch_size=None)
    assert a.states["$step"] == 1
    assert not np.array_equal(drawn(a, node, {"B": 4}), u0)  # a new step, a new draw
    b = dlc.Session(src, backend="numpy", seed=2)
    assert not np.array_equal(drawn(b, node, {"B": 4}), u0)  # another seed


def test_dropout_gradient_is_the_mask_times_the_scale():
    src = "input x: [B, 5]\nparam w: [5] = ones\nloss l = sum(dropout(x * w, 0.25))\n"
    x = np.arange(1.0, 21.0, dtype=np.float32).reshape(4, 5)
    sess = dlc.Session(src, backend="numpy")
    (node,) = random_nodes(sess.model.graph)
    keep = drawn(sess, node, {"B": 4}) >= np.float32(0.25)
    sess.train({"x": x}, optimizer=dlc.SGD(1.0), steps=1, batch_size=None, shuffle=False)
    want = 1.0 - (x * keep / 0.75).sum(0)  # w - lr * d loss / d w
    np.testing.assert_allclose(sess.params["w"], want, rtol=1e-6)


# -- batch_norm against PyTorch --------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])  # sgd: the params move by the gradients themselves
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 2, 5)], ids=["BC", "NHWC"])
def test_batch_norm_trains_and_evaluates_as_torch(shape, optimizer):
    rng = np.random.default_rng(0)
    c = shape[-1]
    src = (
        f"input x: [B{''.join(f', {d}' for d in shape[1:])}]\ninput t: [B{''.join(f', {d}' for d in shape[1:])}]\n"
        f"param s: [{c}] = 2\nparam g: [{c}] = normal(1, 0.2)\nparam b: [{c}] = normal(0, 0.2)\n"
        f"state m: [{c}] = zeros\nstate v: [{c}] = ones\n"
        "y = batch_norm(x * s, g, b, mean=m, var=v, momentum=0.3, eps=0.001)\n"
        "loss l = mean((y - t) ^ 2)\n"
    )
    x = rng.normal(1.0, 2.0, shape).astype(np.float32)
    t = rng.normal(size=shape).astype(np.float32)
    sess = dlc.Session(src, backend="numpy")
    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in sess.params.items()}
    m, v = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)

    def torch_y(training):
        nchw = torch.tensor(x, dtype=torch.float64).movedim(-1, 1) * p["s"].reshape(1, c, *[1] * (len(shape) - 2))
        y = F.batch_norm(nchw, m, v, p["g"], p["b"], training, momentum=0.3, eps=0.001)
        return y.movedim(1, -1)

    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(list(p.values()), lr=0.05)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = ((torch_y(True) - torch.tensor(t, dtype=torch.float64)) ** 2).mean()
        loss.backward()
        opt.step()
        want.append(loss.item())
    dlc_opt = dlc.SGD(0.05) if optimizer == "sgd" else dlc.Adam(0.05)
    got = sess.train({"x": x, "t": t}, optimizer=dlc_opt, steps=3, batch_size=None)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for name in p:
        np.testing.assert_allclose(sess.params[name], p[name].detach().numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sess.states["m"], m.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.states["v"], v.numpy(), rtol=1e-5)  # unbiased running variance
    with torch.no_grad():
        np.testing.assert_allclose(sess.eval("y", {"x": x}), torch_y(False).numpy(), rtol=1e-4, atol=1e-5)


def test_update_statement_sets_state_after_each_step():
    src = (
        "input x: [B, 2]\nparam w: [2] = 1\nstate ema: [2] = zeros\nstate n: [] = 0\n"
        "update ema = 0.5 * ema + 0.5 * mean(x * w, 0)\nupdate n = n + 1\nloss l = sum(x * w)\n"
    )
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    sess = dlc.Session(src, backend="numpy")
    sess.train({"x": x}, optimizer=dlc.SGD(0.0), steps=3, batch_size=None)
    np.testing.assert_allclose(sess.states["ema"], [2.0 * 0.875, 3.0 * 0.875])
    assert sess.states["n"] == 3
    np.testing.assert_array_equal(sess.eval("ema"), sess.states["ema"])  # eval reads it, no update


def test_state_and_update_in_a_def_called_in_a_loop():
    src = (
        "input x: [B, 2]\nparam w: [2] = 1\n"
        "def tracked(x) {\n    state peak: [2] = zeros\n    update peak = maximum(peak, max(x, 0))\n"
        "    return x * 2\n}\n"
        "h = x * w\nfor i in range(2) {\n    h = tracked(h) as t.{i}\n}\nloss l = sum(h)\n"
    )
    sess = dlc.Session(src, backend="numpy")
    assert list(sess.model.states) == ["t.0.peak", "t.1.peak"]
    sess.train({"x": np.array([[1.0, -3.0], [2.0, -1.0]], np.float32)}, optimizer=dlc.SGD(0.0), steps=1)
    np.testing.assert_array_equal(sess.states["t.0.peak"], [2.0, 0.0])
    np.testing.assert_array_equal(sess.states["t.1.peak"], [4.0, 0.0])
    with pytest.raises(dlc.CompileError, match=r"'peek' is not a state.*did you mean 'peak'") as e:
        dlc.compile(src.replace("update peak", "update peek"))
    assert "in def 'tracked' called at line 10" in str(e.value)


# -- saving and loading ------------------------------------------------------------------------------


def test_state_is_saved_loaded_and_checkpointed(tmp_path):
    data = digits(40)
    a = dlc.Session("samples/resnet_bn.dl", backend="numpy")
    adam = dlc.Adam(0.01)
    a.train(data, optimizer=adam, steps=2, batch_size=20)
    a.save(tmp_path / "w.npz")
    b = dlc.Session("samples/resnet_bn.dl", backend="numpy", seed=9)
    b.load(tmp_path / "w.npz")
    for name, value in a.states.items():
        np.testing.assert_array_equal(b.states[name], value)
    np.testing.assert_array_equal(b.eval("logits", data), a.eval("logits", data))
    # a file of params alone loads them and leaves the state as it is
    np.savez(tmp_path / "p.npz", **a.params)
    c = dlc.Session("samples/resnet_bn.dl", backend="numpy")
    c.load(tmp_path / "p.npz")
    np.testing.assert_array_equal(c.states["stem.var"], np.ones(8, np.float32))
    bad = {**a.params, **a.states, "stem.mean": np.zeros(3, np.float32)}
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(DataError, match=r"'stem.mean' has shape \[3\]"):
        c.load(tmp_path / "bad.npz")
    np.testing.assert_array_equal(c.states["stem.var"], np.ones(8, np.float32))  # nothing changed
    # checkpoints hold the state too, and a run resumed from one ends where the whole run does
    a.save_checkpoint(tmp_path / "ck.npz")
    d = dlc.Session("samples/resnet_bn.dl", backend="numpy")
    d.restore(tmp_path / "ck.npz")
    for name, value in a.states.items():
        np.testing.assert_array_equal(d.states[name], value)
    la = a.train(data, optimizer=adam, steps=2, batch_size=20)
    ld = d.train(data, optimizer=dlc.Adam(0.01), steps=2, batch_size=20)
    np.testing.assert_allclose(ld, la, rtol=1e-6)
    e = dlc.Session("samples/mlp_digits.dl", backend="numpy")
    e.save_checkpoint(tmp_path / "other.npz")
    with pytest.raises(DataError):
        d.restore(tmp_path / "other.npz")


def test_a_resumed_run_draws_what_the_whole_run_does(tmp_path):
    data = digits(48)
    whole = dlc.Session("samples/mlp_dropout.dl", backend="numpy", seed=4)
    want = whole.train(data, optimizer=dlc.Adam(0.01), steps=6, batch_size=16)
    part = dlc.Session("samples/mlp_dropout.dl", backend="numpy", seed=4)
    part.train(data, optimizer=dlc.Adam(0.01), steps=6, batch_size=16, callback=lambda step, *_: step < 2)
    part.save_checkpoint(tmp_path / "ck.npz")
    other_seed = dlc.Session("samples/mlp_dropout.dl", backend="numpy", seed=99)
    other_seed.restore(tmp_path / "ck.npz")  # the checkpoint's seed and step counter go on
    got = other_seed.train(data, optimizer=dlc.Adam(0.01), steps=6, batch_size=16, resume=True)
    assert 0 < len(got) < 6
    np.testing.assert_allclose(got, want[6 - len(got) :], rtol=1e-6)
    assert other_seed.states["$step"] == 6


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, message, where",
    [
        ("param p: [2]\nupdate p = p + 1\n", "'p' is not a state", (2, 8)),
        ("input x: [B]\nstate s: [B] = zeros\n", "state 's' has symbolic dim 'B'", (2, 11)),
        ("state s: [2] = zeros\nupdate s = s + 1\nupdate s = s * 2\n", "state 's' is updated twice", (3, 8)),
        ("state s: [2] = zeros\nupdate s = [1, 2, 3]\n", r"update of state 's' \[2\] has shape \[3\]", (2, 8)),
        (
            "input x: [B, 2]\nparam m: [2]\nstate v: [2] = ones\ny = batch_norm(x, 1, 0, mean=m, var=v)\n",
            "batch_norm's mean must be a state",
            (4, 5),
        ),
        ("input x: [B, 2]\ny = dropout(x, 1.5)\n", r"dropout's p is a probability in \[0, 1\]", (2, 5)),
        ("u = random_uniform([0, 2])\n", "random_uniform's dims must be positive", (1, 5)),
        ("state s: [2] = 1\nstate s: [2] = 2\n", "duplicate name 's'", (2, 7)),
    ],
)
def test_errors_are_located(src, message, where):
    with pytest.raises(dlc.CompileError, match=message) as e:
        dlc.compile(src)
    assert (e.value.loc.line, e.value.loc.column) == where


def test_data_parallel_refuses_model_state():
    from dlc.compiler.train_graph import build_split_step

    with pytest.raises(dlc.DlcError, match="model with state"):
        build_split_step(dlc.compile("samples/mlp_dropout.dl").graph, None, dlc.SGD(0.1))


# -- the samples against PyTorch -----------------------------------------------------------------------


def test_resnet_bn_sample_matches_torch():
    got, want, states, torch_states, logits, torch_logits = compare_resnet(
        dlc.Session("samples/resnet_bn.dl", backend="numpy"), digits(24), steps=4
    )
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for name, value in torch_states.items():
        np.testing.assert_allclose(states[name], value, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(logits, torch_logits, rtol=1e-3, atol=1e-4)


def test_mlp_dropout_sample_matches_torch_with_dlcs_masks():
    got, want, masks = compare_mlp_dropout(dlc.Session("samples/mlp_dropout.dl", backend="numpy"), digits(32), 4)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert all(0.3 < m.mean() < 0.7 for m in masks) and not np.array_equal(masks[0], masks[1])


def test_onnx_import_escapes_every_statement_keyword():
    # an imported tensor named `update` would otherwise start an `update` statement
    import re

    from dlc.compiler.importers.names import KEYWORDS, escape
    from dlc.compiler.parser import _grammar

    starts = set(re.findall(r'^\s*(?:\?stmt:|\|)\s*"([a-z]+)"', _grammar(), re.M))
    assert {"state", "update", "param"} <= starts
    assert starts <= KEYWORDS
    for word in starts:
        assert escape(word) != word
        dlc.compile(f"{escape(word)} = 1\n")


def test_the_eval_form_computes_no_train_branch():
    from dlc.compiler.ir import cone
    from dlc.compiler.modes import eval_form, training_form

    graph = dlc.compile("samples/resnet_bn.dl").graph
    drop = dlc.compile("samples/mlp_dropout.dl").graph

    def ops(g, name):
        return {g.nodes[i].op for i in cone(g, [g.names[name]])}

    assert "training" not in ops(eval_form(graph), "logits") | ops(training_form(graph), "logits")

    # batch statistics (sums over the batch) only in training; the running ones in eval
    def sums(g):
        return sum(g.nodes[i].op == "sum" for i in cone(g, [g.names["logits"]]))

    assert sums(training_form(graph)) == 11 and sums(eval_form(graph)) == 1  # 5 batch_norms, the pool
    assert "random_uniform" in ops(training_form(drop), "logits")
    assert "random_uniform" not in ops(eval_form(drop), "logits")
