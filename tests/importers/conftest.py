"""The ONNX importer's tests need the onnx package (`pip install "dlc[onnx]"`), some also
PyTorch (CPU) to export models and as the oracle.

Locally they skip with the reason when one is missing; CI sets DLC_REQUIRE_ONNX=1
(.ci/run installs both), where a missing package fails instead of skipping.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zoo  # tests/importers/zoo.py (this folder is on the path)

ROOT = Path(__file__).resolve().parents[2]


def need(module: str, why: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("DLC_REQUIRE_ONNX"):
            raise
        pytest.skip(f"{module} is not installed ({why})")


@pytest.fixture(scope="session")
def onnx():
    return need("onnx", 'pip install "dlc[onnx]"')


@pytest.fixture(scope="session")
def torch():
    return need("torch", "PyTorch CPU is an optional oracle: pip install torch")


@pytest.fixture(scope="session")
def onnxruntime():
    return need("onnxruntime", 'the ONNX zoo\'s oracle: pip install "dlc[test]"')


@pytest.fixture(scope="session")
def onnxscript():
    return need("onnxscript", 'torch.onnx.export(dynamo=True) needs it: pip install "dlc[onnx]"')


@pytest.fixture(scope="module")
def exported(request, onnx, torch, tmp_path_factory):
    """`exported(name, dynamo=False)`: the zoo model (zoo.py) exported to ONNX by TorchScript
    or dynamo (which skips without onnxscript), once a test module: (path, module, example)."""
    cache = {}

    def get(name, dynamo=False):
        if dynamo:
            request.getfixturevalue("onnxscript")
        if (name, dynamo) not in cache:
            path = tmp_path_factory.mktemp("zoo") / f"{name}.onnx"
            module, example = zoo.export(torch, name, path, dynamo)
            cache[name, dynamo] = (path, module, example)
        return cache[name, dynamo]

    return get


def run_dlc(*args, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlc", *map(str, args)],
        cwd=cwd or ROOT,
        env={**os.environ, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def dlc_cli():
    return run_dlc
