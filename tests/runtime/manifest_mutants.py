"""Structured mutations of compiled artifacts, for the manifest fuzzer (seeded, reproducible).

`json_mutant(base, rng)` changes a parsed manifest the way a careless or hostile person
might: deletes keys, changes types, puts out-of-range ints, huge or negative sizes, path
traversal and odd identifiers, swaps cross references between fields, or garbles the JSON text
itself. `file_mutant(folder, rng)` damages the files beside the manifest. Each returns what it
did, for the failure message.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np

ODD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    -4,
    1,
    2**31,
    2**31 - 1,
    2**40,
    -(2**63),
    2**64,
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "B",
    "../../etc/passwd",
    "/etc/passwd",
    "a/b.glsl",
    "..",
    "dim0; x",
    "dim0",
    "W1",
    "$lr",
    "x" * 300,
    "\u2028",
    "nan",
    [],
    {},
    [1],
    [[1]],
    ["B"],
    {"a": 1},
    {"flat": [1], "per_group": 1},
    [2**40],
    [-4],
]
ODD_KEYS = ["dim0; x", "", "0", "../x", "$lr", "W1", "B", "dim9", "x" * 300, "format"]

# Fields the runtime does not act on: a mutant that changes only these must still run and
# give the pristine results.
INERT_TOP = {"dlc_version", "model"}
INERT_ANYWHERE = {"ir", "locs", "label", "peak_bytes", "ref_dims", "local_size", "reads", "fetch", "inplace"}
INERT_KERNEL = {"name", "kind"}


def inert(changed: list[tuple]) -> bool:
    """Whether every changed path is one the runtime ignores (text damage never is)."""

    def one(path):
        if path[:1] and path[0] in INERT_TOP or path[:2] == ("train", "batch_size"):
            return True
        if any(k in INERT_ANYWHERE for k in path if isinstance(k, str)):
            return True
        return len(path) == 5 and path[2] == "kernels" and path[4] in INERT_KERNEL

    return bool(changed) and all(one(p) for p in changed)


def paths(node, prefix=()):
    """Every (path, value) below `node`: paths are tuples of keys and list indices."""
    out = [(prefix, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(paths(v, (*prefix, i)))
    return out


def _at(m, path):
    for key in path:
        m = m[key]
    return m


def _set(m, path, value):
    _at(m, path[:-1])[path[-1]] = value


def describe(path) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".") or "<root>"


_paths_of: dict[str, list] = {}  # manifest text -> [(path, type of its value, length)]


def _index(base_text: str, m) -> list:
    if base_text not in _paths_of:
        _paths_of[base_text] = [(p, type(v), len(v) if isinstance(v, (dict, list)) else 0) for p, v in paths(m)[1:]]
    return _paths_of[base_text]


def _pick(options: list, rng: np.random.Generator):
    return options[int(rng.integers(len(options)))]


def json_mutant(base_text: str, rng: np.random.Generator) -> tuple[bytes, str, list]:
    """(manifest bytes, what was done, the paths changed: [] for text-level damage)."""
    m = json.loads(base_text)
    op = rng.choice(["delete", "replace", "replace", "int", "int", "swap", "swap", "copy", "rename", "list", "text"])
    if op == "text":
        return _garble(base_text.encode(), rng)
    nodes = _index(base_text, m)
    path, kind, _ = _pick(nodes, rng)
    where = describe(path)
    if op == "delete":
        del _at(m, path[:-1])[path[-1]]
        what = f"deleted {where}"
    elif op == "replace":
        new = _pick(ODD_VALUES, rng)
        _set(m, path, new)
        what = f"{where} = {new!r:.60}"
    elif op == "int":
        path = _pick([p for p, t, _ in nodes if t is int], rng)
        value = _at(m, path)
        where = describe(path)
        new = int(rng.choice([value + 1, value - 1, -value, 2 * value + 1, value + 2**31, value * 2**20, 0, -1]))
        _set(m, path, new)
        what = f"{where} = {new} (was {value})"
    elif op in ("swap", "copy"):
        same = [p for p, t, _ in nodes if t is kind and p != path and p[: len(path)] != path and path[: len(p)] != p]
        if not same:
            return json.dumps(m).encode(), "nothing to swap", []
        other = _pick(same, rng)
        value, ovalue = _at(m, path), _at(m, other)
        _set(m, path, ovalue)
        if op == "swap":
            _set(m, other, value)
            what = f"swapped {where} and {describe(other)}"
            return json.dumps(m).encode(), what, [path, other]
        what = f"{where} = {describe(other)}"
    elif op == "rename":
        path = _pick([p for p, t, n in nodes if t is dict and n], rng)
        d = _at(m, path)
        key = _pick(list(d), rng)
        new = _pick(ODD_KEYS, rng)
        d[new] = d.pop(key)
        what = f"renamed {describe((*path, key))} to {new!r:.40}"
        path = (*path, key)
    else:  # list: drop, duplicate or reorder entries
        path = _pick([p for p, t, n in nodes if t is list and n], rng)
        lst = _at(m, path)
        where = describe(path)
        how = rng.choice(["drop", "dup", "reverse"])
        if how == "drop":
            lst.pop(int(rng.integers(len(lst))))
        elif how == "dup":
            lst.append(_pick(lst, rng))
        else:
            lst.reverse()
        what = f"{how} in {where}"
    return json.dumps(m).encode(), what, [path]


def _garble(raw: bytes, rng: np.random.Generator) -> tuple[bytes, str, list]:
    how = rng.choice(["truncate", "flip", "insert", "nest", "utf8"])
    if how == "truncate":
        n = int(rng.integers(len(raw)))
        return raw[:n], f"truncated to {n} bytes", []
    if how == "flip":
        i = int(rng.integers(len(raw)))
        b = bytearray(raw)
        b[i] = int(rng.integers(256))
        return bytes(b), f"byte {i} set to {b[i]}", []
    if how == "insert":
        i = int(rng.integers(len(raw)))
        junk = bytes(rng.choice(list(b'{}[],:"0123456789eE.-+ \\nul'), size=int(rng.integers(1, 8))))
        return raw[:i] + junk + raw[i:], f"inserted {junk!r} at {i}", []
    if how == "nest":
        depth = int(rng.integers(500, 50_000))
        return b"[" * depth + raw + b"]" * depth, f"nested {depth} deep", []
    return raw.replace(b'"', b'"\xc3\x28', 1), "invalid UTF-8", []


def file_mutant(folder: pathlib.Path, outside: pathlib.Path, rng: np.random.Generator) -> str:
    """Damage one file beside the manifest in `folder`; `outside` is a file outside it."""
    files = sorted(p for p in folder.iterdir() if p.name != "manifest.json")
    victim = files[int(rng.integers(len(files)))]
    how = rng.choice(["remove", "truncate", "garble", "empty", "symlink_out", "dir", "big", "symlink_loop"])
    if how == "remove":
        victim.unlink()
    elif how == "truncate":
        data = victim.read_bytes()
        victim.write_bytes(data[: int(rng.integers(len(data)))])
    elif how == "garble":
        data = bytearray(victim.read_bytes())
        for _ in range(int(rng.integers(1, 20))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        victim.write_bytes(bytes(data))
    elif how == "empty":
        victim.write_bytes(b"")
    elif how == "symlink_out":
        victim.unlink()
        victim.symlink_to(outside)
    elif how == "dir":
        victim.unlink()
        victim.mkdir()
    elif how == "big":
        with open(victim, "ab") as f:
            f.truncate(victim.stat().st_size + (64 << 20))  # sparse: cheap to make
    else:
        victim.unlink()
        os.symlink(victim.name, victim)
    return f"{how} {victim.name}"
