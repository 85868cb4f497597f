"""Debug mode: every kernel timed and logged, the first NaN stops the run naming the op and the line."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import dlc
from dlc import debug

MODEL = """\
input x: [B]
param w: [] = 1.0
h = x * w + 1
y = sqrt(h)
loss cost = mean(y)
"""


@pytest.fixture
def debugging():
    debug.reset()
    dlc.set_debug(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's own "invalid value" notes
        yield
    dlc.set_debug(False)
    debug.reset()


def test_eager_nan_names_the_op_and_the_python_line(backend, debugging):
    x = dlc.array([3.0, -5.0])
    y = x + 1
    with pytest.raises(debug.NaNFound) as e:
        y.sqrt()  # the planted NaN
    assert e.value.op == "sqrt"
    assert e.value.loc.file == __file__ and "y.sqrt()" in e.value.loc.text
    assert "NaN in the output of sqrt at" in str(e.value) and "y.sqrt()" in str(e.value)


def test_eager_kernels_are_timed_and_logged(backend, debugging, caplog):
    with caplog.at_level(logging.INFO, logger="dlc.debug"):
        a = dlc.ones([2, 3])
        (a @ dlc.ones([3, 4])).relu().sum()
    names = [r.name for r in debug.records()]
    assert names == ["matmul", "relu", "sum"]
    r = debug.records()[0]
    assert r.shape == (2, 4) and r.size == 8 and r.ms >= 0 and r.device == backend
    assert r.where.startswith(__file__ + ":")
    assert any("matmul" in m and "[2, 4]" in m and " ms" in m for m in caplog.messages)
    table = debug.summary()
    assert all(n in table for n in names) and "calls" in table and "total ms" in table


def test_model_nan_names_the_op_and_the_dl_line(backend, debugging):
    sess = dlc.Session(dlc.compile(MODEL), backend=backend)
    assert sess.eval("y", {"x": np.array([3.0, 8.0], np.float32)}).tolist() == [2.0, 3.0]
    with pytest.raises(debug.NaNFound) as e:
        sess.eval("y", {"x": np.array([3.0, -5.0], np.float32)})
    assert e.value.op == "sqrt" and e.value.loc.line == 4
    assert "y = sqrt(h)" in str(e.value) and "node 'y'" in str(e.value)
    assert "kernel profile" not in debug.summary() and "sqrt" in debug.summary()


def test_training_nan_stops_at_the_forward_line(backend, debugging):
    sess = dlc.Session(dlc.compile(MODEL), backend=backend)
    sess.train({"x": np.array([1.0, 2.0], np.float32)}, optimizer=dlc.SGD(0.1), batch_size=2)
    names = [r.name for r in debug.records()]
    if backend == "numpy":  # one record per IR node
        assert {"mul", "add", "sqrt", "sum"} <= set(names)
    else:  # one per fused kernel, named after its ops
        assert names and all(n.startswith("k") for n in names) and any("sqrt" in n for n in names)
    assert all(r.device == backend and r.ms >= 0 for r in debug.records())
    with pytest.raises(debug.NaNFound) as e:
        sess.train({"x": np.array([-9.0, 2.0], np.float32)}, optimizer=dlc.SGD(0.1), batch_size=2)
    assert e.value.op == "sqrt" and e.value.loc.line == 4


def test_off_means_no_records(backend):
    debug.reset()
    dlc.set_debug(False)
    (dlc.ones([2]) + 1).numpy()
    assert debug.records() == [] and debug.summary() == "dlc debug: no kernels ran"


def test_nan_inside_a_fused_kernel_is_traced_to_its_op(backend, debugging):
    # (GLSL leaves log/exp of a NaN undefined, and llvmpipe's exp(NaN) is 1: use + and *)
    sess = dlc.Session(dlc.compile("input x: [N]\nh = x - 2\nout = 3 * sqrt(h) * 2 + 1\n"), backend=backend)
    with pytest.raises(debug.NaNFound) as e:
        sess.eval("out", {"x": np.array([3.0, 1.0], np.float32)})
    assert e.value.op == "sqrt" and e.value.loc.line == 3 and e.value.loc.column == 11


def test_env_switch_and_summary_at_exit(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text("import dlc\nx = dlc.array([1.0, 4.0])\nprint((x.sqrt() * 2).sum().item())\n")
    env = {**os.environ, "DLC_DEBUG": "1", "DLC_BACKEND": "numpy"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "6.0"
    assert "dlc debug: sqrt" in proc.stderr and "kernel profile" in proc.stderr and "total ms" in proc.stderr
    script.write_text("import dlc\nx = dlc.array([1.0, -4.0])\ny = x.sqrt()\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert f"NaN in the output of sqrt at {script}:3" in proc.stderr and "y = x.sqrt()" in proc.stderr
