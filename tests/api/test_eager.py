"""Eager ops (dlc.ops, Array methods and operators) against the NumPy reference, on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler import registry
from dlc.compiler.registry import FUNCTIONS

rng = np.random.default_rng(0)


def arr(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


# name -> (args, kwargs): np arrays become device arrays; other values are passed as they are.
CASES: dict[str, list[tuple[tuple, dict]]] = {
    **{
        f: [((arr(3, 4),), {})]
        for f in [
            "neg",
            "abs",
            "sign",
            "exp",
            "square",
            "relu",
            "relu6",
            "selu",
            "softplus",
            "sigmoid",
            "tanh",
            "sin",
            "cos",
            "step",
        ]
    },
    **{f: [((arr(3, 4, low=0.1, high=3),), {})] for f in ["log", "sqrt", "rsqrt", "reciprocal"]},
    **{
        f: [((arr(3, 4), arr(4)), {}), ((arr(3, 1), 0.5), {})]
        for f in ["add", "sub", "mul", "maximum", "minimum", "lt", "le", "gt", "ge"]
    },
    "div": [((arr(2, 3), arr(2, 3, low=0.5, high=2)), {}), ((2.0, arr(3, low=0.5)), {})],
    "pow": [((arr(2, 3, low=0.1, high=2), arr(3)), {}), ((arr(4), 2.0), {})],
    "eq": [((np.round(arr(3, 4)), np.round(arr(4))), {})],
    "ne": [((np.round(arr(3, 4)), np.round(arr(3, 1))), {})],
    "leaky_relu": [((arr(5),), {}), ((arr(2, 3),), {"alpha": 0.1})],
    "elu": [((arr(2, 3), 0.5), {})],
    "clip": [((arr(3, 4), -1.0, 0.5), {})],
    "where": [((np.array([1, 0, 1], np.float32), arr(2, 3), arr(2, 1)), {})],
    "matmul": [
        ((arr(2, 3), arr(3, 4)), {}),
        ((arr(3), arr(3, 4)), {}),
        ((arr(2, 3), arr(3)), {}),
        ((arr(2, 2, 3), arr(3, 4)), {}),
    ],
    "transpose": [((arr(2, 3),), {}), ((arr(2, 3, 4),), {"perm": [1, 0, 2]})],
    "sum": [((arr(2, 3, 4),), {}), ((arr(2, 3, 4),), {"axis": [0, 2]}), ((arr(2, 3),), {"axis": 1, "keepdims": True})],
    "max": [((arr(2, 3, 4),), {"axis": 1})],
    "min": [((arr(2, 3, 4),), {})],
    "mean": [((arr(2, 3, 4),), {"axis": -1}), ((arr(5),), {})],
    "argmax": [((arr(3, 5),), {})],
    "argmin": [((arr(3, 5),), {"axis": 0})],
    "logsumexp": [((arr(3, 5),), {}), ((arr(3, 5),), {"axis": 0, "keepdims": True})],
    "softmax": [((arr(3, 5),), {})],
    "log_softmax": [((arr(3, 5),), {"axis": 0})],
    "reshape": [((arr(2, 3, 4),), {"shape": [6, -1]})],
    "concat": [(([arr(2, 3), arr(2, 2)],), {"axis": 1})],
    "slice": [((arr(3, 4), [1, 0], [2, -1]), {})],
    "one_hot": [((np.array([0, 3, 1], np.float32), 4), {})],
    "conv2d": [
        ((arr(1, 5, 5, 2), arr(3, 3, 2, 3)), {}),
        ((arr(2, 6, 6, 1), arr(2, 2, 1, 2)), {"stride": 2, "padding": "valid"}),
        (
            (arr(1, 5, 6, 4), arr(3, 2, 2, 6)),
            {"stride": [2, 1], "padding": [1, 0, 1, 1], "dilation": [1, 2], "groups": 2},
        ),
    ],
    "max_pool": [((arr(1, 4, 4, 2), 2), {}), ((arr(1, 5, 4, 2), 3), {"padding": [1, 1, 1, 0]})],
    "avg_pool": [
        ((arr(1, 5, 5, 1), 3), {"stride": 1, "padding": "same"}),
        ((arr(1, 5, 5, 2), 2), {"padding": [1, 0, 0, 1], "count_include_pad": True}),
    ],
    "global_avg_pool": [((arr(2, 3, 5, 4),), {})],
    "global_max_pool": [((arr(2, 5, 3, 4),), {})],
    "mean_squared": [((arr(3, 2), arr(3, 2)), {})],
    "softmax_cross_entropy": [((arr(3, 4), np.eye(4, dtype=np.float32)[[0, 2, 3]]), {})],
    "sigmoid_cross_entropy": [((arr(3, 4), np.round(arr(3, 4, low=0, high=1))), {})],
    "pad": [((arr(2, 3), [1, 0], [0, 2]), {})],
    "erf": [((arr(3, 4),), {})],
    "gelu": [((arr(3, 4),), {}), ((arr(3, 4),), {"approximate": "tanh"})],
    "broadcast_to": [((arr(3, 1), [2, 3, 4]), {})],
    "ones": [(([2, 3],), {})],
    "zeros": [(([4],), {})],
    "full": [(([2, 2], -1.5), {})],
    "arange": [((5,), {})],
    "tril": [((arr(3, 4),), {}), ((arr(2, 3, 3),), {"k": 1})],
    "triu": [((arr(3, 4),), {"k": -1})],
    "split": [((arr(2, 6), [1, 2, 3]), {"axis": 1})],
    "stack": [(([arr(2, 3), arr(2, 3)],), {"axis": 1})],
    "layer_norm": [((arr(3, 5), arr(5), arr(5)), {}), ((arr(2, 3, 4), arr(3, 4), arr(3, 4)), {"axis": [1, 2]})],
    "rms_norm": [((arr(3, 5), arr(5)), {"eps": 1e-5})],
    "attention": [
        ((arr(2, 5, 4), arr(2, 5, 4), arr(2, 5, 4)), {}),
        ((arr(7, 3), arr(7, 3), arr(7, 3)), {"causal": True}),
    ],
}
# The registry's other elementwise functions, on their oracles' domains and keyword sets.
for _op in registry.REGISTRY.values():
    if _op.kind == "elementwise" and _op.params and _op.oracle and _op.name not in CASES:
        CASES[_op.name] = [
            (tuple(registry.sample(d, rng, (3, 4)).astype(np.float32) for d in _op.oracle.domains(_op.arity)), dict(kw))
            for kw in _op.oracle.call_sets()
        ]


# Functions eager arrays (f32 only) cannot call: gather takes i32 indices.
NOT_EAGER = {"gather"}
# Functions of model state (a training step's random draws, running statistics): refused eagerly.
STATEFUL = {
    "dropout": ((arr(3, 4), 0.5), {}),
    "random_uniform": (([2, 3],), {}),
    "random_normal": (([2, 3],), {}),
    "batch_norm": ((arr(3, 4), arr(4), arr(4), arr(4), arr(4)), {}),
}


def test_every_language_function_has_a_case():
    assert sorted(FUNCTIONS) == sorted([*CASES, *NOT_EAGER, *STATEFUL])


@pytest.mark.parametrize("fname", sorted(STATEFUL))
def test_functions_of_model_state_are_refused_eagerly(backend, fname):
    args, kwargs = STATEFUL[fname]
    with pytest.raises(dlc.CompileError, match="model state|must be a state"):
        eager(fname, args, kwargs)


def test_eager_gather_refuses_float_indices_and_int_comes_back_as_whole_floats():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    with pytest.raises(dlc.CompileError, match="gather's operand 2 holds indices: it must be i32"):
        dlc.ops.gather(x, np.array([1.0, 0.0], np.float32))
    got = dlc.ops.int(np.array([2.7, -2.7, np.nan], np.float32)).numpy()
    np.testing.assert_array_equal(got, [2.0, -2.0, 0.0])


def reference(fname, args, kwargs):
    """The same call through dlc.Graph and the numpy Session (the reference interpreter)."""
    g = dlc.Graph()
    feeds = {}

    def tensor(v):
        if isinstance(v, np.ndarray):
            name = f"a{len(feeds)}"
            feeds[name] = v
            return g.placeholder(name, v.shape)
        return v

    targs = [
        [tensor(v) for v in a] if isinstance(a, list) and a and isinstance(a[0], np.ndarray) else tensor(a)
        for a in args
    ]
    out = getattr(g, fname)(*targs, **kwargs)
    if isinstance(out, tuple):  # several results (split)
        for k, t in enumerate(out):
            g.name(f"out{k}", t)
        got = dlc.Session(g, backend="numpy").eval([f"out{k}" for k in range(len(out))], feeds)
        return tuple(got[f"out{k}"] for k in range(len(out)))
    g.name("out", out)
    return dlc.Session(g, backend="numpy").eval("out", feeds)


def eager(fname, args, kwargs):
    def dev(v):
        if isinstance(v, np.ndarray):
            return dlc.array(v)
        if isinstance(v, list) and v and isinstance(v[0], np.ndarray):
            return [dlc.array(x) for x in v]
        return v

    return getattr(dlc.ops, fname)(*[dev(a) for a in args], **kwargs)


@pytest.mark.parametrize("fname, case", [(f, k) for f in sorted(CASES) for k in range(len(CASES[f]))])
def test_eager_op_matches_reference(backend, fname, case):
    args, kwargs = CASES[fname][case]
    want = reference(fname, args, kwargs)
    got = eager(fname, args, kwargs)
    if isinstance(want, tuple):  # several results (split)
        assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
        assert isinstance(g, dlc.Array) and g.backend == backend
        assert g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w, rtol=2e-5, atol=2e-5)


def test_seeds_mean_squared_difference(backend):
    a = dlc.array(np.array([1.0, 2.0, 3.0, 4.0]).reshape(2, 2))
    b = dlc.array(np.array([0.0, 2.0, 4.0, 6.0]).reshape(2, 2))
    diff = dlc.ops.sub(a, b)
    squared = dlc.ops.elementwise_mul(diff, diff)
    average = dlc.ops.divide(dlc.ops.sum(squared), dlc.array(a.size))
    assert average.get() == 1.5


def test_methods_and_operators(backend):
    x, w = arr(2, 3), arr(3, 4)
    a, b = dlc.array(x), dlc.array(w)
    np.testing.assert_allclose((a @ b).relu().sum(axis=0).numpy(), np.maximum(x @ w, 0).sum(0), rtol=1e-5)
    np.testing.assert_allclose((2 - a * 3 / 4).numpy(), 2 - x * 3 / 4, rtol=1e-6)
    np.testing.assert_allclose((-a).exp().neg().numpy(), -np.exp(-x), rtol=1e-6)
    np.testing.assert_allclose((a**2).numpy(), x**2, rtol=1e-6)
    np.testing.assert_allclose((a > 0).numpy(), (x > 0).astype(np.float32))
    np.testing.assert_allclose((np.ones(3, np.float32) + a).numpy(), 1 + x)  # numpy defers to Array
    np.testing.assert_allclose(a.T.numpy(), x.T)
    np.testing.assert_allclose(
        a.reshape([3, 2]).softmax().numpy(),
        np.exp(x.reshape(3, 2)) / np.exp(x.reshape(3, 2)).sum(1, keepdims=True),
        rtol=1e-5,
    )
    assert a.sum().item() == pytest.approx(float(x.sum()), rel=1e-5)
    assert len(a) == 2 and a.ndim == 2 and a.size == 6 and a.dtype == np.float32


def test_constructors(backend):
    assert dlc.zeros([2, 3]).numpy().tolist() == [[0.0] * 3] * 2
    assert dlc.ones(4).numpy().tolist() == [1.0] * 4
    r = dlc.rand([1000], seed=1).numpy()
    assert r.shape == (1000,) and r.min() >= 0 and r.max() < 1 and abs(r.mean() - 0.5) < 0.05
    n = dlc.randn([2000], mean=3.0, std=2.0, seed=2).numpy()
    assert abs(n.mean() - 3.0) < 0.2 and abs(n.std() - 2.0) < 0.2
    np.testing.assert_array_equal(dlc.rand([5], seed=7).numpy(), dlc.rand([5], seed=7).numpy())
    s = dlc.array(2.5)
    assert s.shape == () and float(s) == 2.5


def test_kernels_are_cached_by_op_shapes_and_static_args(backend):
    dlc.ops.clear_cache()  # count from empty, whatever ran before
    a, b = dlc.array(arr(2, 3)), dlc.array(arr(2, 3))
    dlc.ops.add(a, b)
    assert dlc.ops.cached_kernels() == 1
    dlc.ops.add(b, a)
    dlc.ops.add(dlc.array(arr(2, 3)), a)
    dlc.ops.add(dlc.array(arr(3, 5)), dlc.array(arr(3, 5)))  # another shape: the same flat kernel
    assert dlc.ops.cached_kernels() == 1
    dlc.ops.add(dlc.array(arr(3, 4)), dlc.array(arr(3, 4)))  # a multiple of 4: the vec4 kernel
    dlc.ops.add(a, dlc.array(arr(3)))  # broadcasting: compiled for its shapes
    dlc.ops.sum(a, axis=0)
    dlc.ops.sum(a, axis=1)
    assert dlc.ops.cached_kernels() == 5


def test_shape_error_points_at_the_call(backend):
    a, b = dlc.zeros([2, 3]), dlc.zeros([2, 3])
    with pytest.raises(dlc.CompileError) as e:
        a @ b  # the line the error names
    assert e.value.loc.file == __file__
    assert "a @ b" in e.value.loc.text and "do not fit" in e.value.message


@pytest.mark.gl
def test_mixing_backends_is_refused(gl):
    a, b = dlc.array([1.0], backend="gl"), dlc.array([1.0], backend="numpy")
    with pytest.raises(ValueError, match="different backends"):
        a + b


def test_disposed_array_cannot_be_used(backend):
    a = dlc.array([1.0, 2.0])
    a.dispose()
    a.dispose()  # twice is fine
    with pytest.raises(ValueError, match="disposed"):
        a.numpy()
    with pytest.raises(ValueError, match="disposed"):
        a + 1


@pytest.mark.gl
def test_a_chain_never_leaves_the_gpu_until_read(gl, monkeypatch):
    from dlc.runtime.storage import Buffer

    downloads = []
    original = Buffer.download

    def counting(self, *args, **kwargs):
        downloads.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Buffer, "download", counting)
    x, w = arr(4, 3), arr(3, 2)
    a, b = dlc.array(x), dlc.array(w)
    y = ((a @ b - 1) * 2).relu().softmax().sum(axis=0)
    z = dlc.ops.mean_squared(y, dlc.ops.exp(y))
    assert downloads == []
    h = np.maximum((x @ w - 1) * 2, 0)
    s = (np.exp(h) / np.exp(h).sum(1, keepdims=True)).sum(0)
    assert z.item() == pytest.approx(float(np.mean((s - np.exp(s)) ** 2)), rel=1e-5)
    assert len(downloads) == 1


def test_split_as_a_method_gives_its_parts(backend):
    x = dlc.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    a, b = x.split([1, 2], axis=1)
    np.testing.assert_array_equal(a.numpy(), [[0], [3]])
    np.testing.assert_array_equal(b.numpy(), [[1, 2], [4, 5]])
