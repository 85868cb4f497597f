"""Start-up (issue 24 item 2): `import dlc` loads nothing heavy, and a warm process (dlc's
compile cache and program binaries on disk) reaches its first training step without the
parser, autodiff, the op registry, fusion, codegen or a single shader compile, with the
values of a cold one.
Checked through sys.modules and link counts, never through time."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import dlc
from dlc.compiler import compile_cache
from dlc.compiler.ir import format_graph
from dlc.compiler.train_graph import build_train_graph

ROOT = pathlib.Path(__file__).resolve().parents[1]
# What `import dlc` must not load: GL, the grammar, the importers, plotting, frameworks.
HEAVY = ("OpenGL", "lark", "onnx", "matplotlib", "torch", "PIL", "dlc.compiler.parser", "dlc.runtime.gl")


def _run(code: str, *args: str, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd
    )


def test_import_dlc_loads_nothing_heavy():
    code = textwrap.dedent(f"""
        import sys, json
        import dlc
        dlc.__version__, dlc.DlcError
        heavy = {HEAVY!r}
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in heavy)))
    """)
    done = _run(code, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_import_dlc_leaves_the_compiler_and_the_gl_runtime_alone():
    """Beyond the packages: `import dlc` (and its version and errors) imports only the
    package, the errors and the version; no thread (the early EGL start belongs to the GL
    runtime's import)."""
    code = textwrap.dedent("""
        import sys, json, threading
        import dlc
        dlc.__version__, dlc.DlcError
        mods = sorted(m for m in sys.modules if m == "dlc" or m.startswith("dlc."))
        print(json.dumps({"mods": mods, "threads": threading.active_count(), "numpy": "numpy" in sys.modules}))
    """)
    done = _run(code, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["threads"] == 1 and not got["numpy"]
    assert not [m for m in got["mods"] if m.startswith(("dlc.compiler.", "dlc.backends", "dlc.session"))]
    assert {"dlc.runtime.context", "dlc.runtime.device", "dlc.runtime.gl"}.isdisjoint(got["mods"])


EARLY_EGL = textwrap.dedent("""
    import json
    from dlc.runtime import context
    from dlc.runtime.device import default_device
    ctx = default_device().context
    early = context._early.get("display")
    print(json.dumps({"thread": "thread" in context._early, "platform": ctx.platform,
                      "same": early is not None and context._address(ctx._handles.get("display")) == early[1]}))
""")


@pytest.mark.gl
def test_the_egl_driver_loads_while_the_runtime_imports_and_the_context_takes_that_display(tmp_path):
    done = _run(EARLY_EGL, cwd=tmp_path)
    if done.returncode != 0 and "no OpenGL context" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    if got["platform"] != "egl":
        pytest.skip("no EGL context here")
    assert got["thread"] and got["same"]


def test_no_early_egl_where_the_context_is_not_egl(tmp_path):
    code = "import json; from dlc.runtime import context, gl; print(json.dumps('thread' in context._early))"
    for env in ({"DLC_GL": "glfw"}, {"PYOPENGL_PLATFORM": "glx"}):
        done = _run(code, env={**os.environ, **env}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) is False, env


@pytest.mark.gl
def test_counting_devices_lets_the_early_display_go(tmp_path):
    """Data-parallel ranks count the devices before choosing theirs: the display readied
    for device 0 is terminated, and a context made after still works."""
    code = textwrap.dedent("""
        import json
        from dlc.runtime import context
        n = context.egl_device_count()
        left = "display" in context._early
        from dlc.runtime.device import default_device
        print(json.dumps({"n": n, "left": left, "renderer": bool(default_device().context.renderer)}))
    """)
    done = _run(code, cwd=tmp_path)
    if done.returncode != 0 and "no OpenGL context" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == {"n": got["n"], "left": False, "renderer": True}


def test_dlc_names_resolve_on_first_use():
    code = "import sys, dlc; dlc.Adam; print('dlc.runtime.optimizers' in sys.modules, 'OpenGL' in sys.modules)"
    done = _run(code, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DLC_COMPILE_CACHE", "1")
    return tmp_path / "cache"


TRAINABLE = [p for p in sorted(glob.glob(str(ROOT / "samples/*.dl"))) if "loss " in pathlib.Path(p).read_text()]


@pytest.mark.parametrize("path", TRAINABLE, ids=lambda p: pathlib.Path(p).name)
def test_a_training_step_reads_back_as_it_was_built(cache, path):
    graph = dlc.compile(path).graph
    opt = dlc.Adam(1e-3)
    built = build_train_graph(graph, None, opt)
    first = compile_cache.train_graph(graph, None, opt)  # built and stored
    assert len(list((cache / "train").iterdir())) == 1
    again = compile_cache.train_graph(graph, None, opt)  # read back
    assert first == built and again == built
    assert format_graph(again) == format_graph(built)
    assert again.__dict__["dtypes"] == built.dtypes  # read back, not worked out by the op registry
    assert list(again.names) == list(built.names) and again.updates == built.updates


def test_a_resident_step_reads_back_as_it_was_built(cache):
    from dlc.compiler.resident import resident_graph

    graph = dlc.compile(str(ROOT / "samples/mlp_digits.dl")).graph
    step = build_train_graph(graph, None, dlc.Adam(1e-3))
    built = resident_graph(step, ["pixels", "labels"], "B", 100)
    assert compile_cache.resident_graph(step, ["pixels", "labels"], "B", 100) == built  # stored
    assert compile_cache.resident_graph(step, ["pixels", "labels"], "B", 100) == built  # read back
    other = compile_cache.resident_graph(step, ["pixels", "labels"], "B", 200)  # another key
    assert other == resident_graph(step, ["pixels", "labels"], "B", 200) and other != built
    assert len(list((cache / "train").iterdir())) == 2


def test_the_step_key_holds_loss_optimizer_and_freeze(cache):
    graph = dlc.compile(str(ROOT / "samples/mlp_digits.dl")).graph
    compile_cache.train_graph(graph, None, dlc.Adam(1e-3))
    compile_cache.train_graph(graph, None, dlc.Adam(1e-3, beta1=0.8))
    compile_cache.train_graph(graph, None, dlc.SGD(0.1))
    step = compile_cache.train_graph(graph, None, dlc.SGD(0.1), freeze=["W1"])
    assert len(list((cache / "train").iterdir())) == 4
    assert "W1" not in dict(step.updates) and "W2" in dict(step.updates)
    assert step == build_train_graph(graph, None, dlc.SGD(0.1), ["W1"])


def test_element_types_that_do_not_fit_are_worked_out_again(cache):
    graph = dlc.compile(str(ROOT / "samples/mlp_digits.dl")).graph
    opt = dlc.SGD(0.1)
    built = compile_cache.train_graph(graph, None, opt)
    (entry,) = (cache / "train").iterdir()
    key = entry.stem
    data = compile_cache._load_json("train", key)
    for dtypes in (["f64"] * len(built.nodes), ["f32"], "f32", None):
        compile_cache._store_json("train", key, {"graph": data["graph"], "dtypes": dtypes})
        again = compile_cache.train_graph(graph, None, opt)
        assert "dtypes" not in again.__dict__ and again.dtypes == built.dtypes


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_a_damaged_step_entry_is_a_miss_and_is_replaced(cache, damage):
    graph = dlc.compile(str(ROOT / "samples/quadratic.dl")).graph
    opt = dlc.Momentum(0.01)
    built = compile_cache.train_graph(graph, None, opt)
    (entry,) = (cache / "train").iterdir()
    data = entry.read_bytes()
    entry.write_bytes(data[:-5] if damage is None else damage)
    assert compile_cache.train_graph(graph, None, opt) == built
    assert entry.read_bytes() == data  # written again


def test_a_schedule_is_part_of_the_key(cache):
    graph = dlc.compile(str(ROOT / "samples/quadratic.dl")).graph
    for steps in (10, 10, 20):
        opt = dlc.SGD(0.01, schedule=dlc.schedules.Cosine(decay_steps=steps))
        assert compile_cache.train_graph(graph, None, opt) == build_train_graph(graph, None, opt)
    assert len(list((cache / "train").iterdir())) == 2


FIRST_STEP = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dlc
    from dlc.runtime import program
    model = dlc.compile(sys.argv[1])
    rng = np.random.default_rng(0)
    data = {"pixels": rng.integers(0, 17, size=(32, 64)).astype(np.float32),
            "labels": rng.integers(0, 10, size=32).astype(np.float32)}
    sess = dlc.Session(model, backend=sys.argv[2], seed=0)
    history = sess.train(data, optimizer=dlc.Adam(1e-3), batch_size=32, steps=2, shuffle=False)
    stages = ("lark", "dlc.compiler.parser", "dlc.compiler.train_graph", "dlc.compiler.pipeline",
              "dlc.compiler.fusion", "dlc.compiler.codegen", "dlc.compiler.registry", "dlc.compiler.gradients")
    # what a step of a .dl model on the compute target never uses, cold or warm: artifacts,
    # generation, the texture target, data files, eval plans, .npz weights
    unused = ("dlc.backends.artifact", "dlc.runtime.artifact.manifest", "dlc.compiler.decode", "dlc.generate",
              "dlc.text", "dlc.runtime.texture_executor", "dlc.data", "dlc.eval_plan", "dlc.runtime.weights",
              "dlc.runtime.npzfile", "dlc.report")
    print(json.dumps({"losses": [float(v) for v in history],
                      "imported": [m for m in stages if m in sys.modules],
                      "unused": [m for m in unused if m in sys.modules],
                      "opengl": [m for m in sys.modules if m.split(".")[0] == "OpenGL"],
                      "links": dict(program.link_counts)}))
""")


@pytest.mark.gl
def test_a_warm_first_step_skips_every_compiler_stage_and_every_shader_compile(tmp_path):
    model = str(ROOT / "samples/mlp_digits.dl")
    env = {
        **os.environ,
        "DLC_CACHE_DIR": str(tmp_path / "cache"),
        "DLC_COMPILE_CACHE": "1",
        "DLC_PROGRAM_BINARY_CACHE": "1",
    }
    env.pop("DLC_VERIFY_IR", None)
    runs = []
    for backend in ("gl", "gl", "numpy"):
        done = _run(FIRST_STEP, model, backend, env=env, cwd=tmp_path)
        if done.returncode != 0 and "no OpenGL context" in done.stderr:
            pytest.skip(done.stderr.strip().splitlines()[-1])
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm, numpy_run = runs
    assert {"lark", "dlc.compiler.train_graph", "dlc.compiler.registry"} <= set(cold["imported"])
    assert cold["links"].get("compiled", 0) > 0
    assert warm["imported"] == []
    assert warm["unused"] == [], "a warm first step imports modules it does not use"
    assert warm["opengl"] == [], "dlc's GL binding is its own: no PyOpenGL"
    assert warm["links"].get("compiled", 0) == 0 and warm["links"].get("from_disk", 0) > 0
    assert warm["losses"] == cold["losses"]
    assert warm["losses"] == pytest.approx(numpy_run["losses"], rel=1e-4)


NO_PYOPENGL = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dlc
    from dlc.runtime.device import get_context
    sess = dlc.Session("input x: [B]\\nparam w: [] = 1\\nloss cost = mean((w * x)^2)\\n", backend="gl", seed=0)
    losses = sess.train({"x": np.arange(4, dtype=np.float32)}, optimizer=dlc.Adam(0.1), batch_size=4, steps=2)
    print(json.dumps({"losses": [float(v) for v in losses], "platform": get_context().platform,
                      "opengl": sorted(m for m in sys.modules if m.split(".")[0] == "OpenGL")}))
""")


@pytest.mark.gl
@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_warm_first_step_imports_no_pyopengl(tmp_path, debug):
    """dlc calls GL through its own ctypes binding (runtime/gl.py, runtime/egl.py): no
    `OpenGL` module in a cold or a warm process, debug mode (glGetError after each call) too."""
    env = {**os.environ, "DLC_CACHE_DIR": str(tmp_path / "cache"), "DLC_COMPILE_CACHE": "1", "DLC_DEBUG": debug}
    env["DLC_PROGRAM_BINARY_CACHE"] = "1"
    runs = []
    for _ in range(2):
        done = _run(NO_PYOPENGL, env=env, cwd=tmp_path)
        if done.returncode != 0 and "no OpenGL context" in done.stderr:
            pytest.skip(done.stderr.strip().splitlines()[-1])
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["opengl"] == [] and warm["opengl"] == []
    assert warm["losses"] == cold["losses"] and warm["losses"][1] < warm["losses"][0]


def test_the_eval_form_keeps_its_element_types(cache):
    from dlc.compiler.modes import eval_form

    graph = dlc.compile(str(ROOT / "samples/mlp_dropout.dl")).graph
    built = eval_form(graph)
    assert built is not graph  # dropout: a rewritten graph
    first = compile_cache.eval_form(graph)  # stored
    again = compile_cache.eval_form(graph)  # its element types read back
    assert first == again == built and again.__dict__["dtypes"] == built.dtypes
    plain = dlc.compile(str(ROOT / "samples/quadratic.dl")).graph
    assert compile_cache.eval_form(plain) is plain  # nothing to rewrite: nothing stored
    assert len(list((cache / "train").iterdir())) == 1


GENERATE = textwrap.dedent("""
    import json, re, sys
    import dlc
    from dlc.runtime import program
    text = open(sys.argv[1]).read()
    for name, value in (("BLOCK", 16), ("L", 1), ("H", 2), ("D", 4), ("C", 8)):
        text = re.sub(rf"^const {name} = \\d+", f"const {name} = {value}", text, flags=re.M)
    sess = dlc.Session(dlc.compile(text, name="gpt.dl"), backend="gl", seed=0)
    ids = sess.generate([1, 2], 20, block=16, temperature=0.8, top_k=5, seed=3)
    stages = ("lark", "dlc.compiler.parser", "dlc.compiler.pipeline", "dlc.compiler.codegen",
              "dlc.compiler.registry")
    print(json.dumps({"ids": ids, "imported": [m for m in stages if m in sys.modules],
                      "links": dict(program.link_counts)}))
""")


@pytest.mark.gl
def test_a_warm_generation_skips_every_compiler_stage(tmp_path):
    env = {**os.environ, "DLC_CACHE_DIR": str(tmp_path / "cache"), "DLC_COMPILE_CACHE": "1"}
    env["DLC_PROGRAM_BINARY_CACHE"] = "1"
    env.pop("DLC_VERIFY_IR", None)
    runs = []
    for _ in range(2):
        done = _run(GENERATE, str(ROOT / "samples/char_gpt.dl"), env=env, cwd=tmp_path)
        if done.returncode != 0 and "no OpenGL context" in done.stderr:
            pytest.skip(done.stderr.strip().splitlines()[-1])
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert {"lark", "dlc.compiler.registry", "dlc.compiler.codegen"} <= set(cold["imported"])
    assert warm["imported"] == [] and warm["links"].get("compiled", 0) == 0
    assert warm["ids"] == cold["ids"] and len(warm["ids"]) == 20


@pytest.mark.parametrize("offered", [{"GL_KHR_parallel_shader_compile"}, {"GL_ARB_parallel_shader_compile"}, set()])
def test_a_cold_start_asks_for_every_compiler_thread_the_driver_offers(monkeypatch, offered):
    """Background compiles through the KHR extension, or the ARB one where only that is
    offered (NVIDIA's drivers), asked for once; nothing where neither is offered."""
    from types import SimpleNamespace

    from dlc.runtime import program

    calls = []
    for vendor in ("KHR", "ARB"):  # the binding's entry points (kept in its instance dict once resolved)
        name = f"glMaxShaderCompilerThreads{vendor}"
        monkeypatch.setitem(vars(program.GL), name, lambda n, v=vendor: calls.append((v, n)))
    device = SimpleNamespace(parallel_compiles=None, context=SimpleNamespace(extensions=frozenset(offered)))
    program._parallel_compiles(device)
    program._parallel_compiles(device)
    want = [(next(iter(offered)).split("_")[1], 0xFFFFFFFF)] if offered else []
    assert calls == want and device.parallel_compiles is bool(offered)
