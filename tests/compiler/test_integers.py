"""i32 inputs, gather, the casts and the class-id cost on the NumPy reference, against PyTorch
(nn.Embedding, F.cross_entropy) and closed forms; the located refusals; int feeds and data
files refused naming the array and the row."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.data import load_data
from dlc.runtime.errors import DataError

torch = pytest.importorskip("torch")
F = torch.nn.functional

EMBED = """
input tokens: i32[B, T]
input targets: i32[B, T]
param wte: [11, 4]
param w: [4, 6]
x = gather(wte, tokens)
logits = x @ w
loss cost = softmax_cross_entropy(logits, targets)
"""


def _session(src: str) -> dlc.Session:
    return dlc.Session(dlc.compile(src), backend="numpy", seed=3)


def test_gather_is_nn_embedding_values_and_table_gradient():
    s = _session(EMBED)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 11, size=(3, 5))  # int64, as NumPy makes them
    targets = rng.integers(0, 6, size=(3, 5))
    feeds = {"tokens": tokens, "targets": targets}
    wte = torch.tensor(s.params["wte"], dtype=torch.float64, requires_grad=True)
    w = torch.tensor(s.params["w"], dtype=torch.float64, requires_grad=True)
    emb = torch.nn.Embedding.from_pretrained(wte, freeze=False)
    x = emb(torch.tensor(tokens))
    cost = F.cross_entropy((x @ w).reshape(-1, 6), torch.tensor(targets).reshape(-1))
    cost.backward()
    got = s.eval(["x", "cost"], feeds)
    np.testing.assert_allclose(got["x"], x.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["cost"], cost.item(), rtol=1e-5)
    grads = s.gradients(feeds)
    np.testing.assert_allclose(grads["wte"], emb.weight.grad.numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(grads["w"], w.grad.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("rank", [2, 3])
def test_cross_entropy_with_class_ids_is_torch_cross_entropy(rank):
    shape = (4, 7) if rank == 2 else (2, 3, 7)
    dims = "[B, 7]" if rank == 2 else "[B, 3, 7]"
    ids = "[B]" if rank == 2 else "[B, 3]"
    s = _session(f"input z: {dims}\ninput y: i32{ids}\nloss cost = softmax_cross_entropy(z * 1, y)\n")
    rng = np.random.default_rng(rank)
    z = rng.normal(size=shape) * 3
    y = rng.integers(0, 7, size=shape[:-1])
    zt = torch.tensor(z, requires_grad=True)
    want = F.cross_entropy(zt.reshape(-1, 7), torch.tensor(y).reshape(-1))
    (dz,) = torch.autograd.grad(want, [zt])
    np.testing.assert_allclose(s.eval("cost", {"z": z, "y": y}), want.item(), rtol=1e-5)
    # the gradient is softmax minus the one-hot at the label, over the rows' count
    from dlc.compiler.autodiff import differentiate
    from dlc.compiler.reference import evaluate

    g, grads = differentiate(s.model.graph, "cost", ["z"])
    n = grads["z"]
    dims_b = {"B": shape[0]}
    got = evaluate(g, [n], {"z": z, "y": y}, dims_b, np.float64)[n]
    np.testing.assert_allclose(got, dz.numpy(), rtol=1e-9, atol=1e-12)


def test_one_hot_float_labels_still_work_and_agree_with_class_ids():
    s = _session(
        "input z: [B, 5]\ninput y: i32[B]\nloss a = softmax_cross_entropy(z, y)\n"
        "loss b = softmax_cross_entropy(z, one_hot(y, 5))\n"
    )
    z, y = np.random.default_rng(1).normal(size=(6, 5)), np.array([0, 4, 2, 2, 1, 3])
    got = s.eval(["a", "b"], {"z": z, "y": y})
    np.testing.assert_allclose(got["a"], got["b"], rtol=1e-6)


def test_gather_is_numpy_take_along_any_axis():
    s = _session("input x: [2, 5, 3]\ninput i: i32[B, 2]\na = gather(x, i, axis=1)\nb = gather(x, i, axis=-1)\n")
    x = np.arange(30.0).reshape(2, 5, 3)
    i = np.array([[0, 2], [1, 1], [2, 0]])
    got = s.eval(["a", "b"], {"x": x, "i": i})
    np.testing.assert_array_equal(got["a"], np.take(x, i, axis=1))
    np.testing.assert_array_equal(got["b"], np.take(x, i, axis=2))
    assert got["a"].shape == (2, 3, 2, 3)


def test_out_of_range_ids_are_an_error_on_the_reference():
    s = _session(EMBED)
    with pytest.raises(DataError, match=r"gather: index 11 at position \[1, 0\] is out of range \[0, 11\)"):
        s.eval("x", {"tokens": np.array([[0, 1], [11, 2]])})
    with pytest.raises(DataError, match=r"gather: index -1 at position \[0, 0\]"):
        s.eval("x", {"tokens": np.array([[-1, 1]])})
    with pytest.raises(DataError, match=r"softmax_cross_entropy: class id 6 at position \[0, 1\]"):
        s.eval("cost", {"tokens": np.array([[0, 1]]), "targets": np.array([[0, 6]])})


def test_casts_truncate_toward_zero_and_keep_ids_exact():
    s = _session("input x: [N]\ninput t: i32[N]\ni = int(x)\nf = float(t)\nback = reshape(t, [N, 1])\n")
    x = np.array([2.7, -2.7, 0.5, np.nan, np.inf, -np.inf, 3e9], np.float32)
    t = np.array([2**31 - 1, -(2**31), -1, 0, 1, 16777217, 7])
    got = s.eval(["i", "f", "back"], {"x": x, "t": t})
    assert got["i"].dtype == np.int32 and got["back"].dtype == np.int32
    np.testing.assert_array_equal(got["i"], [2, -2, 0, 0, 2**31 - 1, -(2**31), 2**31 - 1])
    np.testing.assert_array_equal(got["back"][:, 0], t)
    np.testing.assert_array_equal(got["f"], t.astype(np.float32))


def test_comparisons_and_where_take_ids():
    s = _session("input t: i32[N]\nm = t == 3\nz = where(t, 1.0, -1.0)\nh = one_hot(t, 4)\n")
    t = np.array([3, 0, 1, 3])
    got = s.eval(["m", "z", "h"], {"t": t})
    np.testing.assert_array_equal(got["m"], [1, 0, 0, 1])
    np.testing.assert_array_equal(got["z"], [1, -1, 1, 1])
    np.testing.assert_array_equal(got["h"], np.eye(4)[t])


@pytest.mark.parametrize(
    "src, where, message",
    [
        ("input tokens: i32[B]\ny = exp(tokens)\n", "2:5", "exp needs an f32 operand, got i32"),
        ("input tokens: i32[B]\ny = tokens * 2\n", "2:12", "mul needs f32 operands, but operand 1 is i32"),
        ("input t: i32[B, 3]\nparam w: [3, 2]\ny = t @ w\n", "3:7", "needs f32 operands, but operand 1 is i32"),
        ("input t: i32[B]\ny = sum(t)\n", "2:5", "sum needs an f32 operand, got i32"),
        (
            "input x: [B]\nparam w: [4, 2]\ny = gather(w, x)\n",
            "3:5",
            "gather's operand 2 holds indices: it must be i32",
        ),
        ("param w: i32[3]\n", "1:10", "param 'w' is declared i32: a param is f32"),
        ("const c: i32[2] = [1, 2]\n", "1:10", "const 'c' is declared i32"),
        ("input t: i32[2]\ninput x: [2]\ny = concat([t, x], 0)\n", "3:5", "concat takes operands of one element type"),
        ("input z: [B, 3]\ninput y: i32[B, 3]\nloss c = softmax_cross_entropy(z, y)\n", "3:10", "class ids [B, 3]"),
        ("input t: i64[B]\n", "1:10", "expected '[' or an element type"),
    ],
)
def test_element_type_errors_are_located(src, where, message):
    with pytest.raises(dlc.CompileError) as e:
        dlc.compile(src)
    assert f"<model>:{where}: error:" in str(e.value)
    assert message in str(e.value)


def test_ids_carry_no_gradient():
    from dlc.compiler.autodiff import differentiate

    g = dlc.compile(EMBED).graph
    with pytest.raises(Exception, match="tokens"):
        differentiate(g, "cost", ["tokens"])


@pytest.mark.parametrize(
    "value, message",
    [
        (np.array([[1.0, 2.5]]), r"input 'tokens' holds 2\.5 at row 0 \(position \[0, 1\]\), not an integer"),
        (np.array([[1.0], [np.nan]]), r"input 'tokens' holds nan at row 1 .*not an integer"),
        (np.array([[1], [2**31]], np.int64), r"input 'tokens' holds 2147483648 at row 1 .*out of the int32 range"),
        (np.array([[1.0], [-3e9]]), r"input 'tokens' holds -3000000000\.0 at row 1 .*out of the int32 range"),
        (np.array([["a"]]), r"input 'tokens' holds <U1 values, not integers"),
    ],
)
def test_int_feeds_are_checked(value, message):
    s = _session(EMBED)
    with pytest.raises(DataError, match=message):
        s.eval("x", {"tokens": value})


def test_int_feeds_from_any_integer_dtype_and_whole_floats():
    s = _session(EMBED)
    want = s.eval("x", {"tokens": np.array([[1, 2]], np.int32)})
    for v in (np.array([[1, 2]], np.int64), np.array([[1, 2]], np.uint8), np.array([[1.0, 2.0]]), [[1, 2]]):
        np.testing.assert_array_equal(s.eval("x", {"tokens": v}), want)


def test_data_files_feed_i32_inputs_exactly_and_refuse_naming_array_and_row(tmp_path):
    m = dlc.compile("input t: i32[B, 2]\ninput y: [B]\n")
    dtypes = m.input_dtypes
    assert dtypes == {"t": "i32", "y": "f32"}
    ok = tmp_path / "ok.npz"
    np.savez(ok, t=np.array([[2**31 - 1, 0], [5, -7]], np.int64), y=np.array([1.5, 2]))
    data = load_data(ok, m.inputs, dtypes=dtypes)
    assert data.arrays["t"].dtype == np.int32 and data.arrays["y"].dtype == np.float32
    np.testing.assert_array_equal(data.arrays["t"], [[2**31 - 1, 0], [5, -7]])
    bad = tmp_path / "bad.npz"
    np.savez(bad, t=np.array([[1.0, 2.0], [3.0, 0.25]]), y=np.array([1.0, 2.0]))
    with pytest.raises(DataError, match=r"bad\.npz: array 't' holds 0\.25 at row 1 .*not an integer"):
        load_data(bad, m.inputs, dtypes=dtypes)
    big = tmp_path / "big.npz"
    np.savez(big, t=np.array([[1, 2], [3, 2**40]]), y=np.array([1.0, 2.0]))
    with pytest.raises(DataError, match=r"big\.npz: array 't' holds 1099511627776 at row 1 .*int32 range"):
        load_data(big, m.inputs, dtypes=dtypes)
    csv = tmp_path / "ids.csv"
    csv.write_text("t.0,t.1,y\n2147483647,1,0.5\n-5,16777217,1\n")
    data = load_data(csv, m.inputs, dtypes=dtypes)
    np.testing.assert_array_equal(data.arrays["t"], [[2**31 - 1, 1], [-5, 16777217]])
    csv.write_text("t.0,t.1,y\n1,1,0.5\n2,1.5,1\n")
    with pytest.raises(DataError, match=r"ids\.csv: input 't' holds 1\.5 at row 1 .*not an integer"):
        load_data(csv, m.inputs, dtypes=dtypes)


def test_constant_folding_leaves_an_i32_result_an_op():
    from dlc.compiler.simplify import simplify

    m = dlc.compile("param w: [4, 2]\nc = int(2.7)\ny = gather(w, c)\n")
    g = simplify(m.graph)
    assert g.node("c").op == "int" and g.dtype("c") == "i32"
    got = _session("param w: [4, 2]\nc = int(2.7)\ny = gather(w, c)\n").eval(["c", "y"], {})
    assert got["c"].dtype == np.int32 and got["c"].shape == () and got["c"] == 2


def test_graph_api_placeholders_take_i32():
    g = dlc.Graph()
    t = g.placeholder("t", ["B"], dtype="i32")
    w = g.variable("w", np.arange(12.0).reshape(4, 3))
    y = g.gather(w, t)
    s = dlc.Session(g, backend="numpy")
    got = s.eval(y, [{"tensor": t, "data": np.array([3, 1])}])
    np.testing.assert_array_equal(got.numpy(), np.arange(12.0).reshape(4, 3)[[3, 1]])
    with pytest.raises(dlc.CompileError, match="dtype must be 'f32' or 'i32'"):
        g.placeholder("u", [2], dtype="i64")


def test_casts_to_the_type_a_tensor_has_are_the_tensor_itself():
    m = dlc.compile("input t: i32[N]\ninput x: [N]\na = int(t)\nb = float(x)\n")
    assert m.graph.names["a"] == m.graph.names["t"] and m.graph.names["b"] == m.graph.names["x"]
    got = _session("input t: i32[N]\na = reshape(int(t), [N, 1])\n").eval("a", {"t": np.array([16777217])})
    np.testing.assert_array_equal(got, [[16777217]])  # not through a float (16777216)


@pytest.mark.parametrize(
    "dtypes, message",
    [
        ({"t": "i64"}, r"dtypes\.t: .*'i32'"),
        ({"nope": "i32"}, r"dtypes: .*the key 'nope'"),
        ([1], r"dtypes: must be an object"),
    ],
)
def test_an_artifact_manifest_with_bad_dtypes_is_refused(tmp_path, dtypes, message):
    import json

    from dlc.backends.artifact import ArtifactModel
    from dlc.compiler.emit import write_artifact
    from dlc.runtime.errors import DlcError

    folder = write_artifact(dlc.compile("input t: i32[B]\ny = one_hot(t, 3)\n"), tmp_path / "a")
    m = json.loads((folder / "manifest.json").read_text())
    assert m["dtypes"] == {"t": "i32"}
    m["dtypes"] = dtypes
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DlcError, match=message):
        ArtifactModel(folder)
