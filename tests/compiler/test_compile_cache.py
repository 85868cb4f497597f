"""dlc's compile cache on disk (compiler/compile_cache.py): a compiled model's graph and a GL
program read back exactly as they were made, keyed by everything that changes them, and
damaged or foreign files ignored and replaced. The suite turns the cache off (tests/conftest.py);
these tests turn it on with a temporary DLC_CACHE_DIR."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlc
from dlc.compiler import compile_cache
from dlc.compiler.ir import format_graph
from dlc.runtime import binary_cache

SAMPLES = sorted(glob.glob("samples/*.dl"))
ODD = """
input x: [B, 3]
param w: [3] = normal(-0.0, 1e-300)
c = x * 1e-300 + 2.5
m = maximum(x, 0.1)
loss cost = mean((x @ w - 1)^2)
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DLC_COMPILE_CACHE", "1")
    return tmp_path / "cache"


@pytest.mark.parametrize("path", SAMPLES)
def test_a_model_reads_back_as_it_was_compiled(cache, path):
    first = dlc.compile(path)  # compiled, and stored
    assert len(list((cache / "models").iterdir())) == 1
    again = dlc.compile(path)  # read back
    assert again.graph == first.graph
    assert format_graph(again.graph) == format_graph(first.graph)
    assert [n.loc for n in again.graph.nodes] == [n.loc for n in first.graph.nodes]
    assert list(again.graph.names) == list(first.graph.names)


def test_metrics_read_back(cache):
    src = ODD + "metric err = mean(abs(x @ w - 1))\n"
    first = dlc.compile(src)
    again = dlc.compile(src)
    assert first.graph.metrics == again.graph.metrics == ("err",)
    assert again.graph == first.graph


def test_floats_keep_their_bits(cache):
    first = dlc.compile(ODD)
    again = dlc.compile(ODD)
    assert again.graph == first.graph
    init = again.graph.node("w").attr("init")
    assert init == ("normal", -0.0, 1e-300) and np.signbit(init[1])


def test_the_key_holds_the_text_the_path_and_the_compiler(cache):
    base = compile_cache.model_key(ODD, "a.dl")
    assert compile_cache.model_key(ODD, "b.dl") != base  # source locations name the file
    assert compile_cache.model_key(ODD + "\n", "a.dl") != base
    old = compile_cache._stamp
    compile_cache._stamp = "another compiler"
    try:
        assert compile_cache.model_key(ODD, "a.dl") != base
    finally:
        compile_cache._stamp = old


def _only_file(folder: pathlib.Path) -> pathlib.Path:
    (path,) = folder.iterdir()
    return path


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: b"",
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]),  # a flipped bit: the checksum fails
        lambda raw: b"not a cache file at all",
    ],
)
def test_a_damaged_model_entry_is_a_miss_and_is_replaced(cache, damage):
    want = dlc.compile(ODD).graph
    path = _only_file(cache / "models")
    path.write_bytes(damage(path.read_bytes()))
    assert dlc.compile(ODD).graph == want  # compiled again
    assert dlc.compile(ODD).graph == want  # and stored again, whole
    assert compile_cache.load_model(ODD, "<model>") == want


def test_a_well_formed_entry_that_does_not_fit_is_refused(cache):
    want = dlc.compile(ODD).graph
    key = compile_cache.model_key(ODD, "<model>")
    for bad in (
        {"key": key, "graph": {"nodes": [["input", [5], [], [], None]]}},  # reads a later node
        {"key": key, "graph": "no graph"},
        {"key": "another key", "graph": compile_cache._graph_json(want)},  # filed under another key
    ):
        binary_cache.store(key, compile_cache.FORMAT, json.dumps(bad).encode(), "models")
        assert compile_cache.load_model(ODD, "<model>") is None
        assert not (cache / "models" / f"{key}.bin").exists()  # removed
    assert dlc.compile(ODD).graph == want


def test_off_it_reads_and_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("DLC_COMPILE_CACHE", "0")
    dlc.compile(ODD)
    assert not cache.exists()


# A new process: compile a model, run an eval and an Adam step on GL; print the values and
# which parts of the compiler it imported.
CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dlc
    sess = dlc.Session(sys.argv[1], backend="gl", seed=0)
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    feeds = {"x": x, "y_label": 2 * x}
    sess.train(feeds, optimizer=dlc.Adam(0.1), batch_size=8, steps=2)
    heavy = ("lark", "dlc.compiler.parser", "dlc.compiler.fusion", "dlc.compiler.codegen")
    print(json.dumps({"y": sess.eval("y", feeds).tolist(), "imported": [m for m in heavy if m in sys.modules]}))
""")


def _child(tmp_path, model: str, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, model], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    if done.returncode != 0 and "no OpenGL context" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.gl
def test_a_warm_process_imports_neither_the_parser_nor_codegen_and_gets_the_same_values(tmp_path):
    model = str(pathlib.Path("samples/quadratic.dl").resolve())
    env = {**os.environ, "DLC_CACHE_DIR": str(tmp_path / "cache"), "DLC_COMPILE_CACHE": "1"}
    env.pop("DLC_VERIFY_IR", None)
    cold = _child(tmp_path, model, env)
    assert {"lark", "dlc.compiler.codegen"} <= set(cold["imported"])
    warm = _child(tmp_path, model, env)
    assert warm["imported"] == []
    assert warm["y"] == cold["y"]
    # a damaged program entry: compiled again, same values
    for path in (tmp_path / "cache" / "compiled").iterdir():
        path.write_bytes(path.read_bytes()[:-3])
    damaged = _child(tmp_path, model, env)
    assert damaged["y"] == cold["y"] and "dlc.compiler.codegen" in damaged["imported"]


CLI_CHILD = textwrap.dedent("""
    import sys
    from dlc.cli import main
    code = main(["eval", sys.argv[1], "--data", sys.argv[2], "--fetch", "y,cost"])
    heavy = ("lark", "dlc.compiler.parser", "dlc.compiler.fusion", "dlc.compiler.codegen")
    print(code, [m for m in heavy if m in sys.modules])
""")


@pytest.mark.gl
def test_dlc_eval_warm_imports_neither_the_parser_nor_codegen(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[2]
    args = [str(root / "samples/quadratic.dl"), str(root / "samples/data/quadratic.npz")]
    env = {**os.environ, "DLC_CACHE_DIR": str(tmp_path / "cache"), "DLC_COMPILE_CACHE": "1"}
    env.pop("DLC_VERIFY_IR", None)
    outputs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", CLI_CHILD, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )
        if done.returncode != 0 and "no OpenGL context" in done.stderr:
            pytest.skip(done.stderr.strip().splitlines()[-1])
        assert done.returncode == 0, done.stderr
        *values, last = done.stdout.strip().splitlines()
        outputs.append((values, last))
    assert outputs[0][0] == outputs[1][0]  # the same values printed
    assert "'lark'" in outputs[0][1] and outputs[1][1].endswith("[]")


@pytest.mark.parametrize("path", SAMPLES)
def test_every_sample_has_a_program_key_that_holds_what_changes_the_program(path):
    graph = dlc.compile(path).graph
    roots = [graph.names[n] for n in graph.losses] or [len(graph.nodes) - 1]
    base = compile_cache.program_key(graph, roots, (), {"B": 4}, {"device": "x"}, "compute")
    assert base is not None  # blocks' braces, attrs and locations all have a stable text
    assert base == compile_cache.program_key(graph, roots, (), {"B": 4}, {"device": "x"}, "compute")
    others = [
        compile_cache.program_key(graph, roots, (), {"B": 5}, {"device": "x"}, "compute"),
        compile_cache.program_key(graph, roots, (), {"B": 4}, {"device": "y"}, "compute"),
        compile_cache.program_key(graph, roots, (), {"B": 4}, {"device": "x", "nan_flags": True}, "compute"),
        compile_cache.program_key(graph, roots, (), {"B": 4}, {"device": "x"}, "texture"),
        compile_cache.program_key(graph, [0, *roots], (), {"B": 4}, {"device": "x"}, "compute"),
    ]
    assert len({base, *others}) == 6
    assert compile_cache.program_key(graph, roots, (), {}, {"device": object()}, "compute") is None
