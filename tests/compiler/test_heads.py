"""Shapes for attention heads and normalization, on the NumPy reference against PyTorch:
dim products (`[B, T, H*D]`, `reshape(x, [B*T, C])`, a -1 standing for `4*B`), matmul of any
rank with broadcast batch dims, transpose at any rank, split / stack, tril / triu, the filled
tensors (ones, zeros, full, arange) with symbolic dims, layer_norm and rms_norm (values and
gradients), and a causal multi-head attention block under a symbolic batch."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.runtime import dims as dim_algebra

try:
    import torch
except ImportError:  # PyTorch is an optional oracle (.ci/run): the tests that need it skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (pip install torch)")

rng = np.random.default_rng(0)


def arr(*shape):
    return rng.normal(size=shape).astype(np.float32)


def t64(x):
    return torch.tensor(np.asarray(x, np.float64), requires_grad=True)


def run(src: str, fetch: str = "out", **feeds):
    return dlc.Session(dlc.compile(src), backend="numpy").eval(fetch, feeds)


def close(got, want, tol=2e-5):
    want = want.detach().numpy() if hasattr(want, "detach") else want
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# -- the dim algebra -------------------------------------------------------------------------


def test_dim_products_have_one_canonical_form():
    assert dim_algebra.product("T", "B") == "B*T"
    assert dim_algebra.product(2, "B", 2) == "4*B"
    assert dim_algebra.product(3, 4) == 12
    assert dim_algebra.product("2*B", "T") == "2*B*T"
    assert dim_algebra.factors("2*B*T") == (2, ("B", "T"))
    assert dim_algebra.value("4*B*T", {"B": 3, "T": 5}) == 60
    assert dim_algebra.bind(("B", "B*T", 7), {"B": 2, "T": 3}) == (2, 6, 7)


def test_shapes_carry_products_through_reshape_and_back():
    src = """
input x: [B, T, 4*8]
h = reshape(x, [B, T, 4, 8])
heads = transpose(h, [0, 2, 1, 3])
flat = reshape(heads, [-1, T, 8])
rows = reshape(x, [B*T, 32])
out = reshape(flat * 2, [B, 4*T*8])
"""
    m = dlc.compile(src)
    g = m.graph
    assert g.shape("x") == ("B", "T", 32)
    assert g.shape("flat") == ("4*B", "T", 8)
    assert g.shape("rows") == ("B*T", 32)
    assert g.shape("out") == ("B", "32*T")
    x = arr(3, 5, 32)
    got = dlc.Session(m, backend="numpy").eval("out", {"x": x})
    close(got, (x.reshape(3, 5, 4, 8).transpose(0, 2, 1, 3).reshape(-1, 5, 8) * 2).reshape(3, -1))


def test_an_input_may_use_a_product_of_its_dims():
    src = "input x: [B, T]\ninput y: [B*T, 3]\nout = sum(y) + sum(x)\n"
    x, y = arr(2, 3), arr(6, 3)
    close(run(src, x=x, y=y), np.asarray(y.sum() + x.sum()), 1e-4)
    with pytest.raises(dlc.DataError, match=r"B\*T = 6 from the other dims, not 5"):
        run(src, x=x, y=arr(5, 3))


@pytest.mark.parametrize(
    "src, message, where",
    [
        ("input x: [B, H*4]\n", "dim 'H' in a product is bound by no input", (1, 14)),
        ("input x: [B, 4/2]\n", "'/' is not allowed", (1, 15)),
        ("input x: [B]\nparam w: [B*2, 3]\n", "param 'w' has symbolic dim '2*B'", (2, 11)),
        ("param w: [4*16, 2]\ny = reshape(w, [8*8*2])\n", "", None),  # products of ints fold
        ("input x: [B, 6]\ny = reshape(x, [B*4, 2])\n", "cannot reshape [B, 6]", (2, 5)),
        ("input x: [B, 6]\ny = reshape(x, [-1, 4])\n", "the -1 cannot be resolved", (2, 5)),
        ("input x: [B, 6]\ny = reshape(x, [C*2, 3])\n", "unknown dim 'C'", (2, 17)),
    ],
)
def test_dim_errors_are_located(src, message, where):
    if where is None:
        assert dlc.compile(src).graph.shape("y") == (128,)
        return
    with pytest.raises(dlc.CompileError) as e:
        dlc.compile(src)
    assert message in str(e.value)
    if where:
        assert (e.value.loc.line, e.value.loc.column) == where


# -- matmul of any rank ------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((2, 3, 5, 4), (2, 3, 4, 6)),  # heads: batch dims equal
    ((2, 3, 5, 4), (4, 6)),  # a weight shared by every batch
    ((4, 5), (2, 3, 5, 6)),
    ((2, 1, 5, 4), (1, 3, 4, 6)),  # batch dims broadcast both ways
    ((3, 5, 4), (2, 1, 4, 6)),  # ranks differ
    ((2, 3, 5, 4), (4,)),
    ((4,), (2, 3, 4, 6)),
    ((2, 2, 2, 3, 4), (2, 1, 2, 4, 5)),  # rank 5
]


@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES)
@needs_torch
def test_matmul_of_any_rank_matches_torch_with_gradients(sa, sb):
    src = f"param a: {list(sa)}\nparam b: {list(sb)}\ninput r: {list(np.broadcast_shapes(*_mm_out(sa, sb)))}\n"
    src += "out = a @ b\nloss l = sum(out * r)\n"
    m = dlc.compile(src)
    a, b = arr(*sa), arr(*sb)
    r = arr(*m.graph.shape("out"))
    sess = dlc.Session(m, backend="numpy")
    sess.set_params({"a": a, "b": b})
    ta, tb = t64(a), t64(b)
    want = ta @ tb
    close(sess.eval("out", {"r": r}), want)
    (want * torch.tensor(r, dtype=torch.float64)).sum().backward()
    grads = sess.gradients({"r": r})
    close(grads["a"], ta.grad, 1e-4)
    close(grads["b"], tb.grad, 1e-4)


def _mm_out(sa, sb):
    return [np.matmul(np.zeros(sa), np.zeros(sb)).shape]


def test_matmul_with_symbolic_batch_dims():
    src = "input q: [B, 2, T, 4]\ninput k: [B, 2, T, 4]\nout = q @ transpose(k, [0, 1, 3, 2])\n"
    m = dlc.compile(src)
    assert m.graph.shape("out") == ("B", 2, "T", "T")
    q, k = arr(3, 2, 5, 4), arr(3, 2, 5, 4)
    close(dlc.Session(m, backend="numpy").eval("out", {"q": q, "k": k}), q @ k.transpose(0, 1, 3, 2))


def test_matmul_batch_dims_that_do_not_broadcast_are_located():
    with pytest.raises(dlc.CompileError, match=r"batch dims of \[2, 3, 4, 5\] and \[3, 2, 5, 4\]") as e:
        dlc.compile("input a: [2, 3, 4, 5]\ninput b: [3, 2, 5, 4]\nout = a @ b\n")
    assert (e.value.loc.line, e.value.loc.column) == (3, 9)


# -- split, stack, tril, triu, filled tensors --------------------------------------------------


@needs_torch
def test_split_binds_several_names_and_stack_joins_them():
    src = """
input x: [B, 5, 12]
q, k, v = split(x, [4, 4, 4], axis=-1)
first, rest = split(x, [2, 3], axis=1)
out = stack([q, k, v], axis=1)
"""
    x = arr(2, 5, 12)
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    tx = torch.tensor(x)
    q, k, v = torch.split(tx, 4, dim=-1)
    for name, want in {"q": q, "k": k, "v": v, "out": torch.stack([q, k, v], 1)}.items():
        close(sess.eval(name, {"x": x}), want)
    close(sess.eval("rest", {"x": x}), tx[:, 2:])


@needs_torch
def test_split_and_stack_gradients_match_torch():
    src = """
param x: [3, 6]
input r: [3, 2, 3]
a, b = split(x, [3, 3], axis=1)
loss l = sum(stack([b * b, a], axis=1) * r)
"""
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    x, r = arr(3, 6), arr(3, 2, 3)
    sess.set_params({"x": x})
    tx = t64(x)
    a, b = torch.split(tx, 3, dim=1)
    (torch.stack([b * b, a], 1) * torch.tensor(r, dtype=torch.float64)).sum().backward()
    close(sess.gradients({"r": r})["x"], tx.grad, 1e-4)


@pytest.mark.parametrize(
    "src, message, where",
    [
        ("input x: [4, 6]\na, b = split(x, [2, 3], axis=1)\n", "must be positive ints adding up to axis 1", (2, 8)),
        ("input x: [4, 6]\na, b = split(x, [2, 2, 2], axis=1)\n", "2 names for 3 tensors", (2, 8)),
        ("input x: [4, 6]\na = split(x, [3, 3], axis=1)\n", "this gives 2 tensors", (2, 5)),
        ("input x: [4, 6]\na = relu(split(x, [3, 3], axis=1))\n", "this gives 2 tensors", (2, 10)),
        ("input x: [4, 6]\na, b = relu(x)\n", "2 names, but the right side is one tensor", (2, 8)),
        ("input x: [4, 6]\na, a = split(x, [3, 3], axis=1)\n", "'a' is bound twice", (2, 4)),
        ("input x: [4, 6]\nx, b = split(x, [3, 3], axis=1)\n", "duplicate name 'x'", (2, 1)),
        ("input x: [B, 6]\na, b = split(x, [1, 1], axis=0)\n", "split along symbolic dim B", (2, 8)),
        ("input x: [4, 6]\ny = stack([x, transpose(x)])\n", "stack takes tensors of one shape", (2, 5)),
        ("input x: [6]\ny = tril(x)\n", "tril takes a tensor of rank 2 or more", (2, 5)),
    ],
)
def test_split_stack_tril_errors_are_located(src, message, where):
    with pytest.raises(dlc.CompileError) as e:
        dlc.compile(src)
    assert message in str(e.value)
    assert (e.value.loc.line, e.value.loc.column) == where


@pytest.mark.parametrize("k", [-1, 0, 2])
@needs_torch
def test_tril_triu_match_torch_including_nan_and_inf(k):
    x = arr(2, 4, 5)
    x[0, 0, 3] = np.nan  # above the diagonal: tril gives 0 there, as torch does
    x[1, 3, 0] = np.inf
    tx = torch.tensor(x)
    close(run(f"input x: [B, 4, 5]\nout = tril(x, k={k})\n", x=x), torch.tril(tx, k))
    np.testing.assert_array_equal(run(f"input x: [B, 4, 5]\nout = triu(x, k={k})\n", x=x), torch.triu(tx, k).numpy())


@needs_torch
def test_tril_with_symbolic_dims_and_its_gradient():
    x = arr(3, 3)
    close(run("input x: [T, T]\nout = tril(x, k=-1)\n", x=x), np.tril(x, -1))
    src = "param w: [4, 5]\ninput r: [4, 5]\nout = tril(w) + triu(w * w, k=1)\nloss l = sum(out * r)\n"
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    w, r = arr(4, 5), arr(4, 5)
    sess.set_params({"w": w})
    tw = t64(w)
    ((torch.tril(tw) + torch.triu(tw * tw, 1)) * torch.tensor(r, dtype=torch.float64)).sum().backward()
    close(sess.gradients({"r": r})["w"], tw.grad, 1e-4)


@needs_torch
def test_filled_tensors_follow_symbolic_dims():
    src = """
input x: [B, T]
o = ones([B, T]) + x
z = zeros([B*T, 2])
f = full([T, B], -2.5)
out = arange(T)
n = arange(B*T)
"""
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    x = arr(2, 3)
    close(sess.eval("o", {"x": x}), x + 1)
    close(sess.eval("z", {"x": x}), np.zeros((6, 2)))
    close(sess.eval("f", {"x": x}), np.full((3, 2), -2.5))
    close(sess.eval("out", {"x": x}), torch.arange(3.0))
    close(sess.eval("n", {"x": x}), np.arange(6.0))
    with pytest.raises(dlc.CompileError, match="ones dims must be positive") as e:
        dlc.compile("y = ones([2, 0])\n")
    assert e.value.loc.line == 1


# -- layer_norm, rms_norm ----------------------------------------------------------------------


@pytest.mark.parametrize("axis, norm_shape", [(-1, (6,)), ([1, 2], (4, 6))])
@needs_torch
def test_layer_norm_matches_torch_with_gradients(axis, norm_shape):
    axis_src = str(axis)
    src = f"""
param x: [3, 4, 6]
param g: {list(norm_shape)}
param b: {list(norm_shape)}
input r: [3, 4, 6]
out = layer_norm(x, g, b, axis={axis_src}, eps=1e-3)
loss l = sum(out * r)
"""
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    x, g, b, r = arr(3, 4, 6) * 3 + 1, arr(*norm_shape), arr(*norm_shape), arr(3, 4, 6)
    sess.set_params({"x": x, "g": g, "b": b})
    tx, tg, tb = t64(x), t64(g), t64(b)
    want = torch.nn.functional.layer_norm(tx, norm_shape, tg, tb, eps=1e-3)
    close(sess.eval("out", {"r": r}), want, 1e-4)
    (want * torch.tensor(r, dtype=torch.float64)).sum().backward()
    grads = sess.gradients({"r": r})
    for name, t in (("x", tx), ("g", tg), ("b", tb)):
        close(grads[name], t.grad, 2e-4)


@needs_torch
def test_rms_norm_matches_torch_with_gradients():
    src = """
param x: [5, 8]
param g: [8]
input r: [5, 8]
out = rms_norm(x, g)
loss l = sum(out * r)
"""
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    x, g, r = arr(5, 8), arr(8), arr(5, 8)
    sess.set_params({"x": x, "g": g})
    tx, tg = t64(x), t64(g)
    want = torch.nn.functional.rms_norm(tx, (8,), tg, eps=1e-6)
    close(sess.eval("out", {"r": r}), want, 1e-4)
    (want * torch.tensor(r, dtype=torch.float64)).sum().backward()
    grads = sess.gradients({"r": r})
    close(grads["x"], tx.grad, 2e-4)
    close(grads["g"], tg.grad, 2e-4)


@pytest.mark.parametrize(
    "call, message",
    [
        ("layer_norm(x, g, g, axis=0)", "normalizes over trailing axes of [B, 6], got axis 0"),
        ("layer_norm(x, h, g)", "gamma must have the shape of the normalized axes [6], got [5]"),
        ("rms_norm(x, g, eps=-1)", "eps must be >= 0"),
        ("rms_norm(w, k, axis=[1, 2])", "rows hold at most 8192 elements, got [100, 100] = 10000"),
        ("layer_norm(x, x, x, axis=[0, 1])", "normalized axes must be concrete, got [B, 6]"),
    ],
)
def test_norm_errors_are_located(call, message):
    src = "input x: [B, 6]\ninput g: [6]\ninput h: [5]\ninput w: [2, 100, 100]\ninput k: [100, 100]\n"
    with pytest.raises(dlc.CompileError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        dlc.compile(src + f"y = {call}\n")
    assert (e.value.loc.line, e.value.loc.column) == (6, 5)


# -- a causal multi-head attention block ------------------------------------------------------

ATTENTION = """
input x: [B, T, 16]
param w_qkv: [16, 48]
param w_out: [16, 16]
param ln_g: [16]
param ln_b: [16]
h = layer_norm(x, ln_g, ln_b)
q, k, v = split(h @ w_qkv, [16, 16, 16], axis=-1)
qh = transpose(reshape(q, [B, T, 4, 4]), [0, 2, 1, 3])
kh = transpose(reshape(k, [B, T, 4, 4]), [0, 2, 1, 3])
vh = transpose(reshape(v, [B, T, 4, 4]), [0, 2, 1, 3])
att = qh @ transpose(kh, [0, 1, 3, 2]) * 0.5
keep = tril(ones([T, T]))
att = where(keep, att, -1e9)
y = softmax(att, axis=-1) @ vh
out = x + reshape(transpose(y, [0, 2, 1, 3]), [B, T, 16]) @ w_out
loss l = mean(out * out)
"""
ATTENTION = ATTENTION.replace("att = where", "masked = where").replace("softmax(att,", "softmax(masked,")


def attention_params(seed: int = 1) -> dict:
    r = np.random.default_rng(seed)
    return {
        "w_qkv": (r.normal(size=(16, 48)) * 0.3).astype(np.float32),
        "w_out": (r.normal(size=(16, 16)) * 0.3).astype(np.float32),
        "ln_g": (1 + 0.1 * r.normal(size=16)).astype(np.float32),
        "ln_b": (0.1 * r.normal(size=16)).astype(np.float32),
    }


def attention_torch(x: np.ndarray, params: dict):
    """The same block in PyTorch (float64): (out, loss, {param: grad})."""
    p = {k: t64(v) for k, v in params.items()}
    bsz, t, c = x.shape
    tx = torch.tensor(x, dtype=torch.float64)
    h = torch.nn.functional.layer_norm(tx, (c,), p["ln_g"], p["ln_b"], eps=1e-5)
    q, k, v = (h @ p["w_qkv"]).split(c, dim=-1)
    heads = [z.view(bsz, t, 4, 4).transpose(1, 2) for z in (q, k, v)]
    att = heads[0] @ heads[1].transpose(-1, -2) * 0.5
    att = att.masked_fill(torch.tril(torch.ones(t, t)) == 0, -1e9)
    y = torch.softmax(att, dim=-1) @ heads[2]
    out = tx + y.transpose(1, 2).reshape(bsz, t, c) @ p["w_out"]
    loss = (out * out).mean()
    loss.backward()
    return out, loss, {k: v.grad for k, v in p.items()}


@pytest.mark.parametrize("batch", [1, 3])
@needs_torch
def test_causal_attention_block_matches_torch_forward_and_backward(batch):
    model = dlc.compile(ATTENTION)
    assert model.graph.shape("att") == ("B", 4, "T", "T")
    params = attention_params()
    x = arr(batch, 5, 16)
    sess = dlc.Session(model, backend="numpy")
    sess.set_params(params)
    out, loss, grads = attention_torch(x, params)
    close(sess.eval("out", {"x": x}), out, 1e-4)
    close(sess.eval("l", {"x": x}), loss, 1e-4)
    got = sess.gradients({"x": x})
    for name, want in grads.items():
        close(got[name], want, 1e-4)


def test_the_graph_api_takes_dim_products_in_any_order():
    g = dlc.Graph()
    x = g.placeholder("x", ["B", "T", 6])
    g.name("y", g.reshape(x, ["T*B", 6]))
    q, k = g.split(x, [2, 4], axis=-1)
    g.name("k", k)
    model = g.build()
    assert model.graph.shape("y") == ("B*T", 6) and model.graph.shape("k") == ("B", "T", 4)
    v = arr(2, 3, 6)
    out = dlc.Session(model, backend="numpy").eval(["y", "k"], {"x": v})
    close(out["y"], v.reshape(6, 6))
    close(out["k"], v[..., 2:])
