"""Issue 15's API points: device-array indexing, what dlc.ops shows, the seeds' camelCase
names, `slice` with a symbolic size, extra feeds ignored, epochs with steps refused."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.runtime.errors import CompileError, DataError

X = np.arange(2 * 5 * 7, dtype=np.float32).reshape(2, 5, 7)

BASIC = [
    0,
    -1,
    (1, 2),
    (slice(None), 2),
    slice(1, 3),
    (Ellipsis, -1),
    slice(None, None, 2),
    (0, slice(None, None, 3), slice(1, None, 2)),
    (None, 1),
    (slice(None), None, 0),
    (1, 2, 3),
    (-2, -1, -7),
    slice(3, 1),
    (),
    Ellipsis,
    (slice(-4, None), slice(0, 5, 4)),
]


# -- device arrays: NumPy's basic indexing on the device ----------------------------------


@pytest.mark.parametrize("key", BASIC, ids=repr)
def test_basic_indexing_matches_numpy(backend, key):
    a = dlc.array(X)
    got = a[key]
    assert isinstance(got, dlc.Array) and got.backend == backend
    assert got.shape == X[key].shape
    np.testing.assert_array_equal(got.numpy(), X[key])


def test_indexing_frees_its_intermediates(backend):
    a = dlc.array(X)
    before = dlc.memory().arrays
    b = a[0, ::2, 1::3]  # a box slice, a zero pad, reshapes and slices per stepped axis
    assert dlc.memory().arrays == before + 1
    np.testing.assert_array_equal(b.numpy(), X[0, ::2, 1::3])


@pytest.mark.parametrize(
    "key, error, words",
    [
        ((0, 0, 0, 0), IndexError, "too many indices"),
        (2, IndexError, "out of bounds for axis 0 with size 2"),
        ((0, -6), IndexError, "index -6 is out of bounds for axis 1"),
        (slice(None, None, -1), IndexError, "negative steps"),
        ([0, 1], TypeError, "basic indexing only"),
        (True, TypeError, "boolean"),
        (1.5, TypeError, "not float"),
        ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
    ],
)
def test_bad_indices_are_refused_clearly(key, error, words):
    a = dlc.array(X, backend="numpy")
    with pytest.raises(error, match=words):
        a[key]


# -- dlc.ops shows ops only ------------------------------------------------------------------


def test_dlc_ops_exposes_only_ops():
    from dlc.compiler.registry import FUNCTIONS

    public = [n for n in dir(dlc.ops) if not n.startswith("_")]
    for helper in ("np", "dataclass", "inspect", "Any", "annotations", "GraphBuilder"):
        assert helper not in public and not hasattr(dlc.ops, helper)
    assert set(FUNCTIONS) <= set(public)
    assert set(public) <= set(dlc.ops.__all__)
    ns: dict = {}
    exec("from dlc.ops import *", ns)
    assert "np" not in ns and "relu" in ns
    np.testing.assert_array_equal(dlc.ops.relu(dlc.array([-1.0, 2.0], backend="numpy")).numpy(), [0.0, 2.0])


# -- the seeds' camelCase names ----------------------------------------------------------

SEEDS_NAMES = {
    "matrixTimesVector": "matmul",
    "vectorTimesMatrix": "matmul",
    "elementWiseMul": "mul",
    "meanSquaredCost": "mean_squared",
    "squaredDiff": "square",
    "addStrict": "add",
    "scaledArrayAdd": "add",
    "leakyRelu": "leaky_relu",
    "softmaxCrossEntropyCost": "softmax_cross_entropy",
    "argmaxEquals": "eq",
    "logSumExp": "logsumexp",
    "oneHot": "one_hot",
    "maxPool": "max_pool",
    "switchDim": "transpose",
    "reduceSum": "sum",
}


@pytest.mark.parametrize("seeds, ours", SEEDS_NAMES.items())
def test_seeds_camel_case_names_suggest_the_dlc_name(seeds, ours):
    with pytest.raises(CompileError) as info:
        dlc.compile(f"input x: [3]\ny = {seeds}(x, x)\n")
    assert f"unknown function '{seeds}', did you mean '{ours}'?" in str(info.value)
    with pytest.raises(AttributeError, match=f"did you mean '{ours}'"):
        getattr(dlc.Graph(), seeds)
    with pytest.raises(AttributeError, match=f"did you mean '{ours}'"):
        getattr(dlc.ops, seeds)


def test_every_camel_case_op_name_of_the_seeds_is_mapped():
    """The op-like camelCase names the seeds' text uses (grep of /work/shared/seeds)."""
    from dlc.compiler.seed_names import SEED_NAMES

    used = {"matrixTimesVector", "elementWiseMul", "meanSquaredCost", "squaredDiff", "addStrict", "scaledArrayAdd"}
    assert used <= set(SEED_NAMES)


# -- slice with a symbolic size ------------------------------------------------------------

SLICED = """\
input x: [B, 6]
param w: [2] = normal(0, 1)
h = slice(x, [0, 1], [B, 2])
t = slice(x, [0, 3], [-1, -1])
loss cost = sum(h * w) + mean(t)
"""


@pytest.mark.parametrize("where", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_slice_takes_a_symbolic_size(where, request):
    if where == "gl":
        request.getfixturevalue("gl")
    model = dlc.compile(SLICED)
    assert model.tensors["h"] == ("B", 2) and model.tensors["t"] == ("B", 3)
    x = np.random.default_rng(1).normal(size=(5, 6)).astype(np.float32)
    sess = dlc.Session(model, backend=where)
    out = sess.eval(["h", "t", "cost"], {"x": x})
    np.testing.assert_allclose(out["h"], x[:, 1:3], rtol=1e-6)
    np.testing.assert_allclose(out["t"], x[:, 3:], rtol=1e-6)
    w = sess.params["w"]
    np.testing.assert_allclose(sess.gradients({"x": x})["w"], x[:, 1:3].sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(out["cost"], (x[:, 1:3] * w).sum() + x[:, 3:].mean(), rtol=1e-5)


@pytest.mark.parametrize(
    "line, words",
    [
        ("slice(x, [1, 0], [B, 2])", "must take all of it: begin 0 and size B or -1"),
        ("slice(x, [0, 0], [B, B])", "size B for axis 1 of [B, 6]: that axis is 6 long"),
        ("slice(x, [0, 0], [C, 2])", "unknown dim 'C'"),
        ("slice(x, [0, 5], [B, 2])", "out of bounds for axis 1"),
    ],
)
def test_bad_symbolic_slices_are_located(line, words):
    with pytest.raises(CompileError) as info:
        dlc.compile(f"input x: [B, 6]\ny = {line}\n")
    assert words in str(info.value) and info.value.line == 2


# -- Session feeds and train arguments ---------------------------------------------------

QUAD = "input x: [B]\ninput y_label: [B]\nparam a: [] = 1\nloss cost = mean_squared(a * x, y_label)\n"


def test_session_ignores_extra_feeds_with_one_notice(capsys):
    sess = dlc.Session(dlc.compile(QUAD), backend="numpy")
    x = np.arange(4, dtype=np.float32)
    feeds = {"x": x, "y_label": 2 * x, "weights": x}
    cost = sess.eval("cost", feeds)
    np.testing.assert_allclose(cost, np.mean(x**2), rtol=1e-6)
    sess.train(feeds, optimizer=dlc.SGD(0.01), steps=2)
    sess.eval("cost", feeds)
    err = capsys.readouterr().err
    assert err.count("ignoring array 'weights'") == 1
    with pytest.raises(DataError, match="input 'y_label' is missing.*'y_lable': a misspelling"):
        sess.eval("cost", {"x": x, "y_lable": x})


def test_session_train_refuses_epochs_with_steps():
    sess = dlc.Session(dlc.compile(QUAD), backend="numpy")
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(ValueError, match="epochs or steps, not both"):
        sess.train({"x": x, "y_label": x}, epochs=3, steps=5)
    assert len(sess.train({"x": x, "y_label": x}, batch_size=2, epochs=3)) == 6
    assert len(sess.train({"x": x, "y_label": x}, batch_size=2, steps=5)) == 5


# -- debug mode's kernel times -------------------------------------------------------------


@pytest.fixture
def debugging(monkeypatch):
    from dlc import debug

    monkeypatch.setattr(debug, "_wall_clock", False)
    debug.reset()
    dlc.set_debug(True)
    yield debug
    dlc.set_debug(False)
    debug.reset()


def test_gl_times_fall_back_to_the_wall_clock_when_timer_queries_read_zero(gl, debugging, monkeypatch):
    from dlc.runtime.sync import TimerQuery

    monkeypatch.setattr(TimerQuery, "elapsed_ms", lambda self: 0.0)  # as llvmpipe answers
    a = dlc.array(np.ones((256, 256), np.float32))
    for _ in range(3):
        a = (a @ a) * 0.001
    records = debugging.records()
    assert records and all(r.ms > 0 for r in records)
    assert "wall clock around glFinish" in debugging.summary()


def test_debug_log_lines_align_for_long_kernel_names(debugging, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="dlc.debug"):
        for name in ("k00_div", "k06_sum_one_hot_log_add_2more", "k1"):
            debugging.record(name, 1.5, (3, 4), device="gl", width=29)
        debugging.record("k07_one", 1.0, (), device="gl", width=29)
    lines = [r.getMessage() for r in caplog.records]
    assert len({line.index(" ms ") for line in lines}) == 1, lines
    assert lines[-1].rstrip().endswith("1 value")
    table = debugging.summary().splitlines()
    header = next(line for line in table if line.startswith("op"))
    assert all(len(line) <= len(header) + 1 for line in table if line.startswith("k"))
