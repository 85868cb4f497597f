"""Helpers for the command-line tests: run `python -m dlc` in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = SAMPLES / "data"


def run_dlc(
    *args, cwd: Path | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "COLUMNS": "120", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dlc", *map(str, args)],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def dlc_run():
    return run_dlc


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A scratch folder holding copies of the sample models (so default outputs land there)."""
    for name in ("quadratic.dl", "linear.dl", "mlp_digits.dl"):
        shutil.copy(SAMPLES / name, tmp_path / name)
    return tmp_path
