"""The eager buffer pool (runtime/buffer_pool.py): results of eager ops are written to freed
arrays' buffers, and stay right (NumPy is the oracle); the pool is per device, bounded,
thread-safe for finalizers, counted, and emptied by trim and by closing its device."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import dlc
from dlc.runtime import buffer_pool, storage
from dlc.runtime.buffer_pool import pool_of, pooled_buffers, pooled_bytes, size_class

rng = np.random.default_rng(14)


@pytest.fixture
def eager(gl):
    """Eager arrays on GL (compute shaders needed) and the default device's pool, emptied
    (earlier tests' garbage collected first); the pool's bound back to the default after."""
    if not gl.has_compute:
        pytest.skip("this OpenGL has no compute shaders; eager arrays need them")
    dlc.set_backend("gl")
    gc.collect()
    dlc.ops.trim_pool()
    yield pool_of(dlc.gl_devices()[0])
    dlc.set_backend(None)
    dlc.ops.set_pool_limit(None, None)


def _chain(a, b, c):
    return np.maximum((a + b) * c, 0)


def test_size_classes_hold_the_request_and_waste_at_most_a_quarter():
    assert size_class(0) == size_class(1) == size_class(64) == buffer_pool.MIN_CLASS
    for n in [*range(1, 3000), 4096 * 4096 * 4, 10**9 + 7]:
        c = size_class(n)
        assert c >= n and c % 4 == 0 and size_class(c) == c  # a class is its own class
        assert c <= max(buffer_pool.MIN_CLASS, 1.25 * n)
    assert [size_class(n) for n in (65, 80, 81, 96, 112, 128, 129)] == [80, 80, 96, 96, 112, 128, 160]


def test_a_loop_of_dropped_results_reuses_buffers_and_stays_right(eager):
    host = [rng.normal(size=37).astype(np.float32) for _ in range(3)]
    a, b, c = (dlc.array(h) for h in host)
    ((a + b) * c).relu().numpy()  # compiles the ops
    gc.collect()
    reused, created = eager.reused, eager.created
    for i in range(300):
        if i % 50 == 0:  # new values now and then (fresh uploads; the old arrays die)
            host = [rng.normal(size=37).astype(np.float32) for _ in range(3)]
            a, b, c = (dlc.array(h) for h in host)
        got = ((a + b) * c).relu()  # the last round's result dies here: its buffer is reused
        np.testing.assert_allclose(got.numpy(), _chain(*host), rtol=1e-6, atol=1e-7)
        flat = dlc.ops.reshape(got, [37, 1])  # a copy of an input's storage, into a pooled buffer
        np.testing.assert_array_equal(flat.numpy()[:, 0], got.numpy())
    assert eager.reused - reused >= 3 * 300  # every op's result went into a freed buffer ...
    assert eager.created - created <= 8  # ... after the first few rounds


def test_random_ops_over_arrays_of_sizes_sharing_classes_match_numpy(eager):
    """Arrays of lengths whose buffers share size classes (1..16 floats: one class; 17..20:
    the next) made, combined and dropped at random: every result, written to whatever
    freed buffer its class offers, matches NumPy."""
    pick = np.random.default_rng(3)
    live: list[tuple[dlc.Array, np.ndarray]] = []
    reused = eager.reused
    for step in range(240):
        if len(live) < 4 or pick.random() < 0.2:
            host = pick.normal(size=int(pick.choice([3, 5, 8, 13, 16, 17, 20]))).astype(np.float32)
            live.append((dlc.array(host), host))
            continue
        a, ha = live[int(pick.integers(len(live)))]
        same_size = [(b, hb) for b, hb in live if hb.shape == ha.shape]
        b, hb = same_size[int(pick.integers(len(same_size)))]
        c = float(pick.normal())
        kind = step % 5
        if kind == 0:
            got, want = a * c + b, ha * np.float32(c) + hb
        elif kind == 1:
            got, want = (a - b).relu(), np.maximum(ha - hb, 0)
        elif kind == 2:
            got, want = dlc.ops.sum(a * b), np.array((ha.astype(np.float64) * hb).sum())
        elif kind == 3:
            e = np.exp(ha - ha.max())
            got, want = dlc.ops.softmax(a), e / e.sum()
        else:
            got, want = dlc.ops.reshape(a, [1, -1]), ha.reshape(1, -1)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
        if got.size > 1:
            live.append((got, got.numpy()))
        while len(live) > 12:  # drop some at random: their buffers go back to the pool
            live.pop(int(pick.integers(len(live))))
    assert eager.reused - reused > 50


def test_an_output_may_take_the_buffer_of_an_array_a_queued_kernel_still_reads(eager):
    x_host = rng.normal(size=(64, 64)).astype(np.float32)
    w_host = rng.normal(size=(64, 64)).astype(np.float32) / 8
    x, w = dlc.array(x_host), dlc.array(w_host)
    for _ in range(3):
        (x @ w).tanh().numpy()  # compiled and linked before the queue is filled
        y = (x @ w).tanh()
        held = x._handle
        x.dispose()  # while the matmul reading it may still be queued
        assert held.handle and held in eager._order  # pooled, not deleted
        z = dlc.array(rng.normal(size=(64, 64)).astype(np.float32))
        assert z._handle is not held  # an upload never writes into a pooled buffer
        out = z * 3.0  # takes the freed buffer as its output
        assert out._handle is held
        want_y = np.tanh(x_host.astype(np.float64) @ w_host)
        np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out.numpy(), z.numpy() * np.float32(3), rtol=1e-6)
        y.dispose()  # pooled now, not when the next round rebinds the names
        z.dispose()
        x, x_host = out, out.numpy()


def test_finalizers_on_another_thread_only_queue_and_the_next_op_pools(eager):
    a = dlc.array(rng.normal(size=16).astype(np.float32))
    doomed = [a + float(i) for i in range(5)]
    handles = [d._handle for d in doomed]
    eager.collect()
    count = eager.count
    gl_calls: list[int] = []
    real_delete = storage.Buffer.delete

    def spy(self):
        gl_calls.append(threading.get_ident())
        real_delete(self)

    storage.Buffer.delete = spy
    try:
        worker = threading.Thread(target=doomed.clear)  # the arrays' finalizers run on the worker
        worker.start()
        worker.join()
    finally:
        storage.Buffer.delete = real_delete
    assert not gl_calls and eager.count == count and len(eager._released) == len(handles)
    out = a * 2.0  # on this thread: the queued buffers are pooled, one of them reused
    assert out._handle in handles and eager.count == count + len(handles) - 1 and not eager._released
    np.testing.assert_allclose(out.numpy(), a.numpy() * 2, rtol=1e-6)


def _held_by_ops() -> int:
    """Buffers the compiled eager ops keep between calls (scratch, constants)."""
    from dlc.backends import gl_eager

    return sum(len(c.scratch) + len(c.consts) + len(c.split) for c in gl_eager._compiled.values())


def test_live_counts_return_to_the_baseline_once_the_pool_is_trimmed(eager):
    mem = dlc.memory()
    base, held = (storage.live_buffers(), storage.live_bytes()), _held_by_ops()
    assert mem.gl_pooled == mem.gl_pooled_bytes == 0 and (mem.gl_buffers, mem.gl_bytes) == base
    keep = dlc.array(rng.normal(size=(5, 7)).astype(np.float32))
    made = [dlc.ops.softmax(keep, axis=-1) for _ in range(4)] + [keep.sum(axis=0) for _ in range(3)]
    in_use = storage.live_buffers()
    for m in made:
        m.dispose()
    mem = dlc.memory()
    assert mem.gl_pooled == pooled_buffers() == len(made) and mem.gl_pooled_bytes == pooled_bytes() > 0
    assert mem.gl_buffers == storage.live_buffers() == in_use  # pooled buffers are still live GPU memory
    assert mem.gl_bytes == storage.live_bytes()
    keep.dispose()
    dlc.ops.trim_pool()
    mem = dlc.memory()
    assert mem.gl_pooled == mem.gl_pooled_bytes == 0
    # all that is left beyond the baseline is what the newly compiled ops keep (softmax's scratch)
    assert mem.gl_buffers == storage.live_buffers() == base[0] + _held_by_ops() - held


def test_the_pool_keeps_to_its_bounds(eager):
    x = dlc.array(rng.normal(size=8).astype(np.float32))
    dlc.ops.set_pool_limit(3, None)
    assert dlc.ops.pool_limit() == (3, buffer_pool.DEFAULT_MAX_BYTES)
    live = storage.live_buffers()
    made = [x + float(i) for i in range(10)]
    del made
    gc.collect()
    dlc.memory()
    assert eager.count == 3 and storage.live_buffers() == live + 3  # the other 7 were deleted
    dlc.ops.set_pool_limit(None, 2 * 64 + 10)  # bytes: two 64-byte buffers
    assert eager.count == 2 and eager.nbytes == 128
    big = dlc.array(np.zeros(1000, np.float32))  # its 4000 bytes are past the bound: deleted when freed
    handle = big._handle
    big.dispose()
    assert handle.handle == 0 and eager.count == 2
    dlc.ops.set_pool_limit(0, None)  # off: nothing kept
    assert eager.count == 0
    y = x * 2.0
    y.dispose()
    assert eager.count == 0
    np.testing.assert_allclose((x * 2.0).numpy(), x.numpy() * 2)
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="max_buffers must be an int >= 0"):
            dlc.ops.set_pool_limit(bad)
        with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
            dlc.ops.set_pool_limit(None, bad)


def test_two_devices_never_share_a_pool(eager):
    default = dlc.gl_devices()[0]
    second = dlc.open_gl_device()
    try:
        theirs = pool_of(second)
        assert theirs is not eager and pool_of(default) is eager
        foreign = theirs.take(100)
        assert foreign.device is second
        with pytest.raises(ValueError, match=f"buffer of GL device {second.id} given to the pool of GL device"):
            eager.give(foreign)
        theirs.give(foreign)
        assert theirs.count == 1 and foreign not in eager._order
        # eager ops run on the default device even inside `with second:`; second's pool is untouched
        a = dlc.array(rng.normal(size=25).astype(np.float32))
        with second:
            results = [a * float(i) for i in range(4)]
            del results
            b = a + 1.0
        assert b._handle.device is default and theirs.count == 1
        assert all(buf.device is default for buf in eager._order)
        taken = eager.take(100)
        assert taken is not foreign and taken.device is default
        eager.give(taken)
        np.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-6)
        assert pooled_buffers(second) == 1 and pooled_bytes(second) == foreign.capacity
        second.close()  # its pool goes with it; the default's stays
        assert second.pool is None and foreign.handle == 0 and theirs.count == 0
        assert pooled_buffers() == pooled_buffers(default) == eager.count >= 1
    finally:
        second.close()
