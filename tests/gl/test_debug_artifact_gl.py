"""Debug mode on a compiled artifact: a NaN is named with its .dl line, and the runtime still
imports neither the compiler nor lark."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import dlc
from dlc.compiler.emit import write_artifact

pytestmark = pytest.mark.gl

SCRIPT = """
import sys, numpy as np, dlc
runner = dlc.load(sys.argv[1])
try:
    runner.eval("cost", {"x": np.array([0.5, 3.0], np.float32)})
except dlc.RuntimeFailure as e:
    print("caught:", e)
print("imported:", "lark" in sys.modules, "dlc.compiler" in sys.modules)
"""


def test_debug_mode_on_an_artifact_names_the_nan_without_the_compiler(tmp_path):
    model = tmp_path / "nan.dl"
    model.write_text("input x: [B]\nparam w: [] = 1\ny = log(x - w)\nloss cost = mean(y)\n")
    write_artifact(dlc.compile(str(model)), tmp_path / "nan.dlc")
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "nan.dlc")],
        cwd=tmp_path,
        env={**os.environ, "DLC_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "NaN in the output of kernel k00_sub_log at nan.dl:3:5" in r.stdout  # no path of this machine
    assert "imported: False False" in r.stdout
    assert "kernel profile" in r.stderr
