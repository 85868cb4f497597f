"""Storage buffers against NumPy: round trips, GPU copies, zeroing, and the live counters."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gl


@pytest.fixture
def storage(gl_context):
    from dlc.runtime import storage

    return storage


@pytest.mark.parametrize("size", [0, 1, 3, 7, 1001])
def test_upload_download_round_trip(storage, size):
    data = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    buffer = storage.Buffer(data.nbytes)
    try:
        buffer.upload(data)
        np.testing.assert_array_equal(buffer.download(), data)
        assert buffer.download().dtype == np.float32
        if size >= 3:  # partial reads and writes at an offset
            np.testing.assert_array_equal(buffer.download(2, offset_bytes=4), data[1:3])
            buffer.upload(np.array([5.0, 6.0]), offset_bytes=4)
            np.testing.assert_array_equal(buffer.download()[1:3], [5.0, 6.0])
    finally:
        buffer.delete()


def test_upload_converts_to_contiguous_float32(storage):
    data = np.arange(12, dtype=np.float64).reshape(3, 4).T  # not contiguous, not float32
    buffer = storage.Buffer.from_array(data)
    try:
        np.testing.assert_array_equal(buffer.download(), data.astype(np.float32).ravel())
    finally:
        buffer.delete()


def test_zero_byte_buffer(storage):
    buffer = storage.Buffer(0)
    try:
        assert buffer.nbytes == 0 and buffer.capacity == 4
        assert buffer.download().shape == (0,)
        buffer.upload(np.zeros(0))
        buffer.fill_zero()
    finally:
        buffer.delete()


def test_copy_from_with_offsets(storage):
    src_data = np.arange(10, dtype=np.float32)
    src = storage.Buffer.from_array(src_data)
    dst = storage.Buffer(40, zero=True)
    try:
        dst.copy_from(src, nbytes=12, src_offset=8, dst_offset=20)
        expected = np.zeros(10, np.float32)
        expected[5:8] = src_data[2:5]
        np.testing.assert_array_equal(dst.download(), expected)
        dst.copy_from(src)  # all of it
        np.testing.assert_array_equal(dst.download(), src_data)
        src.copy_from(src, nbytes=8, src_offset=0, dst_offset=16)  # disjoint, same buffer
        np.testing.assert_array_equal(src.download()[4:6], [0.0, 1.0])
        with pytest.raises(ValueError, match="overlap"):
            src.copy_from(src, nbytes=8, src_offset=0, dst_offset=4)
        with pytest.raises(ValueError, match="does not fit"):
            dst.copy_from(src, nbytes=8, src_offset=36)
    finally:
        src.delete()
        dst.delete()


def test_fill_zero(storage):
    buffer = storage.Buffer.from_array(np.full(9, 3.5))
    try:
        buffer.fill_zero()
        np.testing.assert_array_equal(buffer.download(), np.zeros(9))
    finally:
        buffer.delete()


def test_without_direct_state_access(storage):
    """The GL 4.3 path (bind points instead of glNamedBuffer*) gives the same results."""
    data = np.arange(5, dtype=np.float32)
    a, b = storage.Buffer(20), storage.Buffer(20)
    a._dsa = b._dsa = False
    try:
        a.upload(data)
        np.testing.assert_array_equal(a.download(), data)
        b.copy_from(a)
        np.testing.assert_array_equal(b.download(3, offset_bytes=8), data[2:])
        a.fill_zero()
        np.testing.assert_array_equal(a.download(), np.zeros(5))
    finally:
        a.delete()
        b.delete()


def test_live_counters_go_up_and_back_down(storage):
    count, nbytes = storage.live_buffers(), storage.live_bytes()
    buffers = [storage.Buffer(n) for n in (0, 6, 400)]
    assert storage.live_buffers() == count + 3
    assert storage.live_bytes() == nbytes + 4 + 8 + 400
    for buffer in buffers:
        buffer.delete()
        buffer.delete()  # idempotent
    assert storage.live_buffers() == count
    assert storage.live_bytes() == nbytes


def test_misuse_is_refused(storage):
    buffer = storage.Buffer(8)
    with pytest.raises(ValueError, match="does not fit"):
        buffer.upload(np.zeros(3))
    with pytest.raises(ValueError, match="does not fit"):
        buffer.download(1, offset_bytes=8)
    with pytest.raises(ValueError, match="negative"):
        storage.Buffer(-1)
    buffer.delete()
    with pytest.raises(ValueError, match="deleted"):
        buffer.download()
