"""The seeds' sample scripts run and print what the seeds say, on numpy and on GL."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def run(script: str, backend: str) -> list[str]:
    if backend == "gl":
        from dlc.runtime.device import has_context

        if not has_context():
            pytest.skip("no OpenGL context")
    proc = subprocess.run(
        [sys.executable, str(SAMPLES / script), "--backend", backend], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


BACKENDS = ["numpy", pytest.param("gl", marks=pytest.mark.gl)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_intro(backend):
    out = run("seeds_intro.py", backend)
    assert out[0] == "mean squared difference: 1.5"
    assert out[1] == "result shape: [2]" and out[2] == "result [80.0, 170.0]"
    assert out[3].startswith("after the scope: a, c, d disposed: True ; output kept: 1.0")
    assert out[-1] == "arrays live at the end: 0"


@pytest.mark.parametrize("backend", BACKENDS)
def test_linear(backend):
    out = run("seeds_linear.py", backend)
    assert out[0] == "[1]"
    costs = [float(m.group(2)) for line in out if (m := re.fullmatch(r"last average cost \((\d+)\): (\S+)", line))]
    assert len(costs) == 10 and costs[-1] < 1e-3 * costs[0]
    i = out.index("---inference output---")
    assert out[i + 1] == "shape: [1]"
    assert abs(float(out[i + 2].removeprefix("value: ")) - 0.4) < 0.01


@pytest.mark.parametrize("backend", BACKENDS)
def test_quadratic(backend):
    out = run("seeds_quadratic.py", backend)
    assert out[0].startswith("result ")
    costs = [float(line.removeprefix("average cost: ")) for line in out if line.startswith("average cost: ")]
    assert len(costs) == 20 and costs[-1] < costs[0] and costs[-1] < 0.5
    assert out[-2] == "result should be ~57.0:"
    assert 55.0 < float(out[-1]) < 60.0
