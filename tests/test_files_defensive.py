"""Data and weight files as untrusted input: damaged, lying or hostile files are refused with
a DataError naming the file (and the CSV line), and writes are atomic on every exit path."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dlc.data import load_data
from dlc.runtime import weights
from dlc.runtime.errors import DataError
from dlc.runtime.weights import load_npz, save_npz, write_atomic

QUAD = {"x": ("B",), "y_label": ("B",)}


def refused(path, inputs=QUAD) -> str:
    with pytest.raises(DataError) as info:
        load_data(path, inputs)
    msg = str(info.value)
    assert msg.startswith(str(path))
    assert "allow_pickle" not in msg
    return msg


def refused_weights(path, shapes=None) -> str:
    with pytest.raises(DataError) as info:
        load_npz(path, shapes)
    msg = str(info.value)
    assert msg.startswith(str(path))
    assert "allow_pickle" not in msg
    return msg


def good_npz(tmp_path: Path, n: int = 1000) -> Path:
    p = tmp_path / "good.npz"
    np.savez(p, x=np.arange(n, dtype=np.float32), y_label=np.ones(n, np.float32))
    return p


def npy_bytes(a: np.ndarray, claim: str | None = None) -> bytes:
    """An .npy of `a`, its header's shape replaced by `claim` (the header stays aligned)."""
    buf = io.BytesIO()
    np.save(buf, a)
    raw = buf.getvalue()
    if claim is None:
        return raw
    n = int.from_bytes(raw[8:10], "little")
    header = raw[10 : 10 + n].decode("latin1")
    header = header.replace(repr(a.shape).replace(" ", ""), claim)
    header = header.replace(str(a.shape), claim).rstrip(" \n")
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return raw[:8] + len(header).to_bytes(2, "little") + header.encode("latin1") + raw[10 + n :]


# -- .npz ---------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated_npz(tmp_path, keep):
    raw = good_npz(tmp_path).read_bytes()
    p = tmp_path / "cut.npz"
    p.write_bytes(raw[: int(len(raw) * keep)])
    assert "not a readable .npz" in refused(p)
    assert "not a readable .npz" in refused_weights(p)


def test_random_bytes_named_npz(tmp_path):
    p = tmp_path / "noise.npz"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    assert "not a zip archive" in refused(p)
    p.write_bytes(b"")
    assert "empty" in refused(p)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_header_claiming_10_to_the_12_elements_is_refused_before_allocating(tmp_path, compression):
    p = tmp_path / "huge.npz"
    with zipfile.ZipFile(p, "w", compression=compression) as z:
        z.writestr("x.npy", npy_bytes(np.zeros(3, np.float32), claim="(1000000000000,)"))
        z.writestr("y_label.npy", npy_bytes(np.zeros(3, np.float32)))
    msg = refused(p)
    assert "array 'x' claims shape [1000000000000]" in msg
    assert "4,000,000,000,000 bytes" in msg
    assert "claims shape" in refused_weights(p)


def test_object_arrays_are_refused_without_unpickling(tmp_path):
    p = tmp_path / "obj.npz"
    np.savez(p, x=np.array([1, "a", None], dtype=object), y_label=np.ones(3))
    assert "pickle" in refused(p) and "never" in refused(p)


def test_a_crc_mismatch_is_refused(tmp_path):
    p = tmp_path / "crc.npz"
    good = npy_bytes(np.arange(64, dtype=np.float32))
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("x.npy", good)
        z.writestr("y_label.npy", good)
    raw = bytearray(p.read_bytes())
    raw[len(good) - 8] ^= 0xFF  # a data byte of x's member, inside the stored bytes
    p.write_bytes(bytes(raw))
    assert "damaged" in refused(p)


def test_good_npz_still_loads(tmp_path):
    d = load_data(good_npz(tmp_path, 5), QUAD)
    np.testing.assert_array_equal(d.arrays["x"], np.arange(5, dtype=np.float32))


# -- .csv ---------------------------------------------------------------------------------


def test_csv_with_a_0xff_byte_names_the_line_and_column(tmp_path):
    p = tmp_path / "d.csv"
    p.write_bytes(b"x,y_label\n1,2\n3,\xff4\n")
    msg = refused(p)
    assert msg.startswith(f"{p}:3: byte 0xff at column 3")


def test_csv_with_a_200000_character_field_names_the_line(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("x,y_label\n1,2\n3,4\n5," + "1" * 200_000 + "\n")
    assert refused(p).startswith(f"{p}:4: not a readable CSV line")
    p.write_text('x,y_label\n1,2\n3,"' + "9" * 200_000 + '"\n')
    assert refused(p).startswith(f"{p}:3:")


def test_csv_with_a_long_non_number_is_shown_shortened(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("x,y_label\n1,2\n3," + "z" * 5000 + "\n")
    msg = refused(p)
    assert msg.startswith(f"{p}:3: column 'y_label' holds") and len(msg) < 300


def test_csv_with_a_nul_byte(tmp_path):
    p = tmp_path / "d.csv"
    p.write_bytes(b"x,y_label\n1,2\n3,\x004\n")
    msg = refused(p)
    assert msg.startswith(f"{p}:3:") and "\x00" not in msg


def test_csv_with_a_bom_still_loads(tmp_path):
    p = tmp_path / "d.csv"
    p.write_bytes(b"\xef\xbb\xbfx,y_label\n1,2\n3,4\n")
    np.testing.assert_array_equal(load_data(p, QUAD).arrays["y_label"], [2, 4])


# -- weight files -----------------------------------------------------------------------


def test_weight_errors_name_the_file(tmp_path):
    p = tmp_path / "w.npz"
    np.savez(p, w=np.ones(3))
    assert "param 'v' is missing" in refused_weights(p, {"w": (3,), "v": ()})
    assert "shape [3]" in refused_weights(p, {"w": (2,)})
    np.savez(p, w=np.array([1.0, np.nan, 2.0]))
    assert "NaN" in refused_weights(p, {"w": (3,)})
    np.savez(p, w=np.array(["a"]))
    assert "not numbers" in refused_weights(p)


def test_truncated_init_file_is_named_by_the_cli(tmp_path):
    root = Path(__file__).resolve().parents[1]
    w = tmp_path / "w.npz"
    save_npz(w, {"a": np.float32(1), "b": np.float32(2), "c": np.float32(3)})
    w.write_bytes(w.read_bytes()[:-40])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlc",
            "train",
            str(root / "samples/quadratic.dl"),
            "--data",
            str(root / "samples/data/quadratic.npz"),
            "--backend",
            "numpy",
            "--steps",
            "1",
            "--init",
            str(w),
            "--save",
            str(tmp_path / "out.npz"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert f"{w}: not a readable .npz file" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


# -- atomic writes --------------------------------------------------------------------------


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, exc):
    p = tmp_path / "w.npz"
    save_npz(p, {"a": np.ones(2)})
    before = p.read_bytes()

    def write(f):
        f.write(b"half")
        raise exc()

    with pytest.raises(exc):
        write_atomic(p, write)
    assert p.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else None))
        real_fsync(fd)

    def replace(a, b):
        events.append(("replace", None))
        real_replace(a, b)

    monkeypatch.setattr(weights.os, "fsync", fsync)
    monkeypatch.setattr(weights.os, "replace", replace)
    write_atomic(tmp_path / "f.bin", lambda f: f.write(b"data"))
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"]
    if events[0][1] is not None:
        assert events[0][1] is False and events[2][1] is True  # the file, then the folder
    assert (tmp_path / "f.bin").read_bytes() == b"data"
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600


def test_a_temp_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = tmp_path / f".w.npz.{dead}.abc123.tmp"
    stale.write_bytes(b"half")
    alive = tmp_path / f".w.npz.{os.getppid()}.def456.tmp"  # a writer that is still running
    alive.write_bytes(b"busy")
    other = tmp_path / f".x.npz.{dead}.abc123.tmp"  # another file's temp: not ours to judge
    other.write_bytes(b"half")
    save_npz(tmp_path / "w.npz", {"a": np.ones(1)})
    assert not stale.exists()
    assert alive.exists() and other.exists()
