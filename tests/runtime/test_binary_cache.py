"""The on-disk program binary cache: a second process loads what the first linked, a corrupt
or foreign file is ignored and recompiled, and the env switches move or turn off the cache.
Each case runs in a fresh process, since linked programs are also cached in memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dlc.runtime import binary_cache

# Links one program, runs it, prints the result and how the program was obtained.
# PROBE_COMMENT and PROBE_SCALE (env) vary a comment line and the code.
PROBE = r"""
import json, os, numpy as np
from dlc.runtime import program, storage
from dlc.runtime.device import get_context
get_context()
src = '''#version 430
// COMMENT
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };
uniform int n;
void main() { uint i = gl_GlobalInvocationID.x; if (i < uint(n)) out_[i] = a[i] * SCALE - 1.0; }
'''
src = src.replace("COMMENT", os.environ.get("PROBE_COMMENT", "a probe"))
src = src.replace("SCALE", os.environ.get("PROBE_SCALE", "3.0"))
p = program.get_program(src, "probe")
a = storage.Buffer.from_array(np.arange(5, dtype=np.float32))
out = storage.Buffer(5 * 4)
p.set_int("n", 5)
p.dispatch((1, 1, 1), [a, out])
print(json.dumps({"out": out.download(5).tolist(), **program.link_counts}))
"""


def _probe(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        if "no OpenGL context" in done.stderr or "RuntimeFailure" in done.stderr:
            pytest.skip(f"no OpenGL context: {done.stderr.strip().splitlines()[-1]}")
        raise AssertionError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _files(root) -> list:
    folder = root / "programs"
    return sorted(folder.glob("*.bin")) if folder.is_dir() else []


@pytest.fixture
def cache(tmp_path, gl_context):
    return {"DLC_CACHE_DIR": str(tmp_path), "DLC_PROGRAM_BINARY_CACHE": "1"}, tmp_path


WANT = [-1.0, 2.0, 5.0, 8.0, 11.0]


def test_second_process_loads_the_binary(cache):
    env, root = cache
    first = _probe(env)
    assert first == {"out": WANT, "compiled": 1, "from_disk": 0}
    if not _files(root):
        pytest.skip("this driver returns no program binaries")
    second = _probe(env)
    assert second == {"out": WANT, "compiled": 0, "from_disk": 1}


@pytest.mark.parametrize("damage", ["garbage", "flipped", "truncated", "empty", "directory"])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(cache, damage):
    env, root = cache
    _probe(env)
    files = _files(root)
    if not files:
        pytest.skip("this driver returns no program binaries")
    path = files[0]
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a program binary at all" * 10)
    elif damage == "flipped":  # header intact, payload changed: the checksum catches it
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
        path.mkdir()
    again = _probe(env)
    assert again["out"] == WANT and again["compiled"] == 1 and again["from_disk"] == 0
    if damage != "directory":  # the recompiled binary replaced the bad file
        assert _probe(env)["from_disk"] == 1


def test_a_binary_the_driver_refuses_is_recompiled(cache, monkeypatch):
    """A well-formed file whose payload is not a binary this driver takes (another driver's,
    or one from before a driver update) falls back to compiling."""
    env, root = cache
    _probe(env)
    files = _files(root)
    if not files:
        pytest.skip("this driver returns no program binaries")
    cache_key = files[0].stem
    monkeypatch.setenv("DLC_CACHE_DIR", str(root))
    binary_cache.store(cache_key, 0x1234, b"\x00" * 256)
    again = _probe(env)
    assert again["out"] == WANT and again["compiled"] == 1 and again["from_disk"] == 0
    assert _probe(env)["from_disk"] == 1


def test_a_source_differing_only_in_comments_loads_the_binary(cache):
    """Kernel comments name the model's file and lines: moving the model keeps its binaries."""
    env, root = cache
    assert _probe({**env, "PROBE_COMMENT": "(model.dl:3)"})["compiled"] == 1
    if not _files(root):
        pytest.skip("this driver returns no program binaries")
    moved = _probe({**env, "PROBE_COMMENT": "(elsewhere/model.dl:12)  // and more"})
    assert moved == {"out": WANT, "compiled": 0, "from_disk": 1}
    changed = _probe({**env, "PROBE_COMMENT": "(model.dl:3)", "PROBE_SCALE": "4.0"})
    assert changed == {"out": [-1.0, 3.0, 7.0, 11.0, 15.0], "compiled": 1, "from_disk": 0}


def test_code_drops_line_comments_only_where_that_is_safe():
    assert binary_cache.code("a = 1;  // one\n// two\nb = 2;\n") == "a = 1;  \n\nb = 2;\n"
    # a line splice carries a comment onto the next line; a // inside a block comment is not one
    for whole in ("// x \\\na = 1;\n", "/* a // b */ c = 1;\n"):
        assert binary_cache.code(whole) == whole
    driver = ("v", "r", "4.5")
    assert binary_cache.key("x = 1;  // a.dl:3\n", driver) == binary_cache.key("x = 1;  // b.dl:9\n", driver)
    assert binary_cache.key("x = 1;  // a\n", driver) != binary_cache.key("x = 2;  // a\n", driver)
    # the same text but for a splice: the second line is code in one and a comment in the other
    assert binary_cache.key("// a\\\nx = 1;\n", driver) != binary_cache.key("// a\nx = 1;\n", driver)


def test_turned_off_writes_nothing(cache):
    env, root = cache
    off = {**env, "DLC_PROGRAM_BINARY_CACHE": "0"}
    assert _probe(off)["compiled"] == 1
    assert _probe(off)["compiled"] == 1
    assert not _files(root)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("DLC_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert binary_cache.cache_dir() == tmp_path / "xdg" / "dlc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert binary_cache.cache_dir() == tmp_path / "home" / ".cache" / "dlc"
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "mine"))
    assert binary_cache.cache_dir() == tmp_path / "mine"


def test_keys_differ_by_driver_and_source():
    base = binary_cache.key("src", ("v", "r", "4.5"))
    assert base != binary_cache.key("src", ("v", "r", "4.6"))
    assert base != binary_cache.key("src2", ("v", "r", "4.5"))
    assert base == binary_cache.key("src", ("v", "r", "4.5"))
