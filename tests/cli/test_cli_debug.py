"""`--debug-kernels`: every kernel logged and profiled, a NaN stops the run at its model line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = SAMPLES / "data"

NAN_MODEL = "input x: [B]\nparam w: [] = 1\ny = log(x - w)\nloss cost = mean(y)\n"


@pytest.mark.parametrize("backend", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_debug_kernels_stops_at_a_nan_naming_the_op_and_line(dlc_run, tmp_path, backend):
    model = tmp_path / "nan.dl"
    model.write_text(NAN_MODEL)
    np.savez(tmp_path / "d.npz", x=np.array([0.5, 3.0], np.float32))  # log(0.5 - 1) is NaN
    r = dlc_run("train", model, "--data", tmp_path / "d.npz", "--steps", "2", "--backend", backend, "--debug-kernels")
    assert r.returncode == 1, r.stderr
    assert f"NaN in the output of log at {model}:3:5" in r.stderr
    assert "y = log(x - w)" in r.stderr
    assert "kernel profile" in r.stderr


def test_debug_kernels_profiles_a_run(dlc_run):
    r = dlc_run(
        "eval",
        SAMPLES / "quadratic.dl",
        "--data",
        DATA / "quadratic.npz",
        "--fetch",
        "cost",
        "--backend",
        "numpy",
        "--debug-kernels",
    )
    assert r.returncode == 0, r.stderr
    assert "dlc debug: pow" in r.stderr  # each kernel logged as it runs
    profile = r.stderr.split("kernel profile", 1)[1]
    assert "calls" in profile and "pow" in profile and "all" in profile
