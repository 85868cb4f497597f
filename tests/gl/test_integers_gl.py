"""i32 tensors on GL, both targets: ids are stored as their own 32 bits (NaN and subnormal
bit patterns included) and come back exact; gather clamps an index out of range; its
gradient gives the same bits every run; an embedding model trains as on the reference."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

pytestmark = pytest.mark.gl

TARGETS = ["compute", "texture"]

# int32 values whose bits are float NaNs (-1, >= 0x7F800001), subnormals (1, 7) and the ends.
EDGE_IDS = np.array(
    [2**31 - 1, -1, 1, 0, 7, 2**31 - 2, -(2**31), 2**24 + 1, 2139095041, -2139095041, 2, 3], np.int64
).reshape(4, 3)

MODEL = """
input t: i32[B, 3]
input y: i32[B, 3]
param wte: [7, 5]
param w: [5, 7]
back = transpose(reshape(t, [3, B]))
picked = gather(wte, t)
logits = picked @ w
loss cost = softmax_cross_entropy(logits, y)
"""


def _sessions(target):
    m = dlc.compile(MODEL)
    ref = dlc.Session(m, backend="numpy", seed=1)
    gl = dlc.Session(m, backend="gl", target=target, seed=1)
    return ref, gl


@pytest.mark.parametrize("target", TARGETS)
def test_ids_near_int32_limits_round_trip_exactly(gl, target):
    _, s = _sessions(target)
    got = s.eval("back", {"t": EDGE_IDS})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, EDGE_IDS.reshape(3, 4).T)


@pytest.mark.parametrize("target", TARGETS)
def test_gather_clamps_an_index_out_of_range_on_gl(gl, target):
    _, s = _sessions(target)
    t = np.array([[0, 6, 9], [-4, 2**31 - 1, 3]])
    want = np.take(s.params["wte"], np.clip(t, 0, 6), axis=0)
    np.testing.assert_array_equal(s.eval("picked", {"t": t}), want)


@pytest.mark.parametrize("target", TARGETS)
def test_class_id_cost_and_its_gradient_match_the_reference(gl, target):
    ref, s = _sessions(target)
    rng = np.random.default_rng(0)
    feeds = {"t": rng.integers(0, 7, size=(9, 3)), "y": rng.integers(0, 7, size=(9, 3))}
    np.testing.assert_allclose(s.eval("cost", feeds), ref.eval("cost", feeds), rtol=1e-5)
    got, want = s.gradients(feeds), ref.gradients(feeds)
    for name in ("wte", "w"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)
    again = s.gradients(feeds)  # no atomics: the scatter-add gives the same bits every run
    np.testing.assert_array_equal(again["wte"], got["wte"])


@pytest.mark.parametrize("target", TARGETS)
def test_an_embedding_model_trains_as_on_the_reference(gl, target):
    # The i32 data stays on the GPU (resident) and each step gathers its rows.
    ref, s = _sessions(target)
    rng = np.random.default_rng(1)
    t = rng.integers(0, 7, size=(20, 3))
    feeds = {"t": t, "y": (t + 1) % 7}
    for sess in (ref, s):
        sess.train(feeds, optimizer=dlc.SGD(0.5), batch_size=5, epochs=3, shuffle=False)
    np.testing.assert_allclose(s.params["wte"], ref.params["wte"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(s.eval("cost", feeds), ref.eval("cost", feeds), rtol=1e-4)


@pytest.mark.parametrize("rows, axis, width, n", [(4100, 0, 6, 7), (5, 1, 6, 7), (3, 0, 6, 7), (70, 0, 130, 100)])
def test_gather_gradient_sums_each_row_in_blocks_of_columns(gl, rows, axis, width, n):
    # Compute target: a work group a row and a block of columns, the indices in tiles through
    # shared memory. Axis 1 has a leading dim before the rows; width 130 takes three blocks
    # (the last partial) and 200 positions take four tiles. Ids repeat, so rows sum several.
    shape = (rows, width) if axis == 0 else (2, rows, width)
    src = f"input t: i32[N, 2]\ninput u: {list(shape)}\nparam table: {list(shape)}\n"
    src += f"loss cost = sum(gather(table, t, axis={axis}) * gather(u, t, axis={axis}))\n"
    m = dlc.compile(src)
    rng = np.random.default_rng(rows)
    feeds = {"t": rng.integers(0, rows, size=(n, 2)), "u": rng.normal(size=shape)}
    feeds["t"][3] = feeds["t"][0]
    want = dlc.Session(m, backend="numpy").gradients(feeds)["table"]
    got = dlc.Session(m, backend="gl", target="compute").gradients(feeds)["table"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(got) > 0


def _scatter_add(t, u, rows, axis):
    """gather(u, t)'s gradient on NumPy with the GL kernels' clamping: u's rows at the
    clamped ids, added into their rows (float64)."""
    ids = np.clip(t, 0, rows - 1).ravel()
    want = np.zeros(u.shape)
    if axis == 0:
        np.add.at(want, ids, u[ids].astype(np.float64))
    else:
        for b in range(u.shape[0]):
            np.add.at(want[b], ids, u[b][ids].astype(np.float64))
    return want


def _split_session(src, chunk):
    m = dlc.compile(src)
    s = dlc.Session(m, backend="gl", target="compute", seed=1)
    s.backend.options["gather_chunk"] = chunk
    return s


def _gather_grad_headers(s) -> list[str]:
    return [
        k.source.split("\n")[1]
        for _, prog, _ in s.backend._programs.values()
        for k in prog.kernels
        if "gather_grad into" in k.source
    ]


@pytest.mark.parametrize(
    "rows, axis, width, n, chunk",
    [(5, 0, 70, 333, 100), (5, 0, 6, 333, 256), (3, 1, 6, 250, 300), (9, 0, 130, 40, 100)],
)
def test_gather_gradient_split_across_work_groups(gl, rows, axis, width, n, chunk):
    # Positions split into chunks (666 of them in chunks of 100: the last 66; a chunk of 100
    # is no whole number of tiles), each group's partial row added in chunk order by the
    # last: ids repeat and some are out of range (clamped into the table, as gather clamps);
    # 80 positions come in one chunk (no partials). The same bits every run.
    shape = (rows, width) if axis == 0 else (2, rows, width)
    src = f"input t: i32[N, 2]\ninput u: {list(shape)}\nparam table: {list(shape)}\n"
    src += f"loss cost = sum(gather(table, t, axis={axis}) * gather(u, t, axis={axis}))\n"
    s = _split_session(src, chunk)
    rng = np.random.default_rng(n)
    feeds = {"t": rng.integers(-2, rows + 2, size=(n, 2)), "u": rng.normal(size=shape).astype(np.float32)}
    feeds["t"][3] = feeds["t"][0]
    got = s.gradients(feeds)["table"]
    assert all(f"a chunk of {chunk} positions" in h for h in _gather_grad_headers(s))
    want = _scatter_add(feeds["t"], feeds["u"], rows, axis)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.count_nonzero(got) > 0
    again = s.gradients(feeds)["table"]  # the counters were set back for the next launch
    np.testing.assert_array_equal(again, got)


def test_a_gather_gradient_over_many_positions_splits_by_itself(gl):
    # 3 rows of 8 (3 groups) over 1200 positions: chunks of MIN_CHUNK = 512 chosen by size,
    # the last 176; the scratch the executor binds is what scratch_words counts (Session.memory)
    from dlc.runtime.executor import scratch_words

    src = "input t: i32[N]\ninput u: [3, 8]\nparam table: [3, 8]\nloss cost = sum(gather(table, t) * gather(u, t))\n"
    s = dlc.Session(dlc.compile(src), backend="gl", target="compute")
    rng = np.random.default_rng(2)
    feeds = {"t": rng.integers(0, 3, size=1200), "u": rng.normal(size=(3, 8)).astype(np.float32)}
    got = s.gradients(feeds)["table"]
    (head,) = _gather_grad_headers(s)
    assert "a chunk of 512 positions" in head, head
    np.testing.assert_allclose(got, _scatter_add(feeds["t"], feeds["u"], 3, 0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(s.gradients(feeds)["table"], got)
    (_, prog, ex) = list(s.backend._programs.values())[0]
    (i,) = [i for i, k in enumerate(prog.kernels) if "gather_grad into" in k.source]
    words = scratch_words(prog.spec.kernels[i].grid, {"N": 1200})
    assert words == 3 * 8 * (1 + 3) and ex.scratch[i].nbytes == 4 * words


def test_a_split_gather_gradient_keeps_its_optimizer_update_merged(gl):
    # Adam's update of the table merged into the split kernel, run once per element by the
    # last group from the finished sum: it trains as the reference does
    rng = np.random.default_rng(1)
    t = rng.integers(0, 7, size=(20, 3))
    feeds = {"t": t, "y": (t + 1) % 7}
    ref = dlc.Session(dlc.compile(MODEL), backend="numpy", seed=1)
    s = _split_session(MODEL, 4)  # 15 positions a batch: four chunks
    for sess in (ref, s):
        sess.train(feeds, optimizer=dlc.Adam(0.05), batch_size=5, epochs=3, shuffle=False)
    (head,) = _gather_grad_headers(s)
    assert "a chunk of 4 positions" in head
    (train,) = [p for _, p, _ in s.backend._programs.values() if p.name == "train"]
    (kernel,) = [k for k in train.kernels if "gather_grad into" in k.source]
    assert "wte$m" in kernel.source and "wte$v" in kernel.source  # the update is in the kernel
    np.testing.assert_allclose(s.params["wte"], ref.params["wte"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s.eval("cost", feeds), ref.eval("cost", feeds), rtol=1e-4)


def test_debug_mode_names_a_gather_index_out_of_range(gl):
    from dlc import debug
    from dlc.runtime.errors import DlcError

    m = dlc.compile("input t: i32[B, 3]\nparam w: [7, 2]\ny = gather(w, t) * 2\n")
    s = dlc.Session(m, backend="gl", target="compute")
    debug.enable()
    try:
        with pytest.raises(DlcError, match=r"gather at <model>:3:5: index 9 at position \[0, 1\] is out of range"):
            s.eval("y", {"t": np.array([[1, 9, 0]])})
        s.eval("y", {"t": np.array([[1, 6, 0]])})  # in range: no error
    finally:
        debug.disable()


@pytest.mark.parametrize("target", TARGETS)
def test_an_artifact_carries_its_i32_inputs(gl, target, tmp_path):
    from dlc.compiler.emit import write_artifact

    m = dlc.compile(MODEL)
    write_artifact(m, tmp_path / "a", target=target)
    s = dlc.Session(str(tmp_path / "a"))
    assert s.model.input_dtypes == {"t": "i32", "y": "i32"}
    got = s.eval("back", {"t": EDGE_IDS})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, EDGE_IDS.reshape(3, 4).T)


@pytest.mark.parametrize("target", TARGETS)
def test_comparing_two_ids_is_exact(gl, target):
    m = dlc.compile("input t: i32[N]\ninput u: i32[N]\ne = t == u\nl = t < u\n")
    feeds = {"t": np.array([2**31 - 1, 16777217, 3, -5]), "u": np.array([2**31 - 2, 16777216, 3, -4])}
    got = dlc.Session(m, backend="gl", target=target).eval(["e", "l"], feeds)
    np.testing.assert_array_equal(got["e"], [0, 0, 1, 0])  # as floats, 2^31-1 == 2^31-2
    np.testing.assert_array_equal(got["l"], [0, 0, 0, 1])
    want = dlc.Session(m, backend="numpy").eval(["e", "l"], feeds)
    np.testing.assert_array_equal(got["e"], want["e"])
    np.testing.assert_array_equal(got["l"], want["l"])
