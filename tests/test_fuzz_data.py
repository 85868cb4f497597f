"""Mutation fuzz of data and weight files: every mutant of a good .npz or .csv is loaded or
refused with a DataError naming the file, never another exception (nor NumPy's advice to
load it with pickle)."""

from __future__ import annotations

import random
import re
import traceback
from pathlib import Path

import numpy as np
import pytest

from dlc.data import load_data
from dlc.runtime.errors import DataError
from dlc.runtime.weights import load_npz

QUAD = {"x": ("B",), "y_label": ("B",)}
LINEAR = {"x": ("B", 3), "label": ("B",)}

SHAPES = [b"1000000000000", b"-1", b"0", b"3, 4", b"", b"2**40", b"99999999999999999999999", b"'a'", b"None", b"7"]
DESCRS = [b"|O", b"<f8", b">i2", b"|V8", b"<U3", b"|b1", b"<c8", b"zz", b"<f4"]


def byte_mutant(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    kind = rng.randrange(7)
    i = rng.randrange(len(b) + 1)
    if kind == 0:
        return bytes(b[:i])  # truncated
    if kind == 1 and b:
        for _ in range(rng.choice((1, 1, 4, 32))):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 2:
        return bytes(b[:i] + rng.randbytes(rng.choice((1, 4, 100))) + b[i:])
    if kind == 3:
        j = min(len(b), i + rng.choice((1, 10, 1000)))
        return bytes(b[:i] + b[j:])
    if kind == 4:
        j = min(len(b), i + rng.choice((10, 200)))
        return bytes(b[:j] + b[i:j] + b[j:])  # a range duplicated
    if kind == 5:  # the .npy header's shape
        return re.sub(rb"'shape': \(([0-9, ]*)\)", lambda m: b"'shape': (" + rng.choice(SHAPES) + b",)", raw, count=1)
    return re.sub(
        rb"'descr': '([^']*)'",  # the .npy header's dtype
        lambda m: b"'descr': '" + rng.choice(DESCRS) + b"'",
        raw,
        count=1,
    )


ODD = [
    "\xff",
    "\x00",
    "\ufeff",
    '"',
    "'",
    ",",
    ",,",
    "\n",
    "\r",
    "\r\n",
    "nan",
    "inf",
    "-",
    "1e999",
    "x",
    "x.0",
    "label",
    " ",
    "\t",
    "é",
    "\u2028",
    "#",
]


def csv_mutant(text: str, rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    i = rng.randrange(len(text) + 1)
    if kind == 0:
        return text[:i].encode()
    if kind == 1:
        s = text[:i] + rng.choice(ODD) + text[i:]
        return s.encode("utf-8", "surrogatepass").replace("ÿ".encode(), b"\xff")
    if kind == 2:
        return (text[:i] + "9" * rng.choice((1000, 200_000)) + text[i:]).encode()
    if kind == 3:
        lines = text.split("\n")
        k = rng.randrange(len(lines))
        lines.insert(k, lines[k]) if rng.random() < 0.5 else lines.pop(k)
        return "\n".join(lines).encode()
    if kind == 4:
        return text.encode()[:i] + bytes([rng.randrange(256)]) + text.encode()[i:]
    j = min(len(text), i + rng.choice((1, 5, 50)))
    return (text[:i] + text[j:]).encode()


def outcome(load, path: Path) -> str:
    try:
        load(path)
    except DataError as e:
        msg = str(e)
        if str(path) not in msg or "allow_pickle" in msg:
            return f"badly worded DataError: {msg[:300]}"
        return "refused"
    except BaseException as e:  # noqa: BLE001 - anything else is the bug this test hunts
        return "".join(traceback.format_exception_only(type(e), e)).strip()[:300]
    return "ok"


@pytest.mark.parametrize("seed", [1, 2])
def test_npz_mutants_load_or_are_refused_cleanly(tmp_path, seed):
    rng = random.Random(seed)
    good = tmp_path / "good.npz"
    x = np.linspace(-1, 1, 40, dtype=np.float32)
    np.savez(good, x=x, y_label=2 * x)
    raw = good.read_bytes()
    seen = {"ok": 0, "refused": 0}
    for k in range(300):
        p = tmp_path / f"m{k}.npz"
        p.write_bytes(byte_mutant(raw, rng))
        for load in (lambda q: load_data(q, QUAD), load_npz):
            got = outcome(load, p)
            assert got in seen, f"mutant {k} of seed {seed}: {got}"
            seen[got] += 1
        p.unlink()
    assert seen["ok"] >= 3 and seen["refused"] > 100, seen


@pytest.mark.parametrize("seed", [1, 2])
def test_csv_mutants_load_or_are_refused_cleanly(tmp_path, seed):
    rng = random.Random(seed)
    text = "x.0,x.1,x.2,label\n" + "".join(f"{i},{i * 0.5},{-i},{i % 3}\n" for i in range(20))
    seen = {"ok": 0, "refused": 0}
    for k in range(300):
        p = tmp_path / f"m{k}.csv"
        p.write_bytes(csv_mutant(text, rng))
        got = outcome(lambda q: load_data(q, LINEAR), p)
        assert got in seen, f"mutant {k} of seed {seed}: {p.read_bytes()[:200]!r} -> {got}"
        seen[got] += 1
        p.unlink()
    assert seen["ok"] > 10 and seen["refused"] > 50, seen
