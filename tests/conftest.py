"""Suite-wide switches: the IR checker runs between every compiler stage, and the tests never
read or write the user's program binary cache (a cached binary would also hide the compiles
some tests count); tests of the cache turn it on in a process of their own with a temporary
DLC_CACHE_DIR."""

from __future__ import annotations

import os

import pytest

from dlc.compiler import pipeline
from dlc.runtime.errors import RuntimeFailure

# In this process and in every `python -m dlc` the tests start.
os.environ["DLC_VERIFY_IR"] = "1"
os.environ["DLC_PROGRAM_BINARY_CACHE"] = "0"
os.environ["DLC_COMPILE_CACHE"] = "0"  # compiled models and programs (compiler/compile_cache.py): same


@pytest.fixture(scope="session")
def gl():
    """The GL context for tests that run shaders: skips with the reason when none can be made
    (tests/api and a few runtime modules define a `gl` of their own)."""
    from dlc.runtime.device import get_context

    try:
        return get_context()
    except RuntimeFailure as exc:
        pytest.skip(f"no OpenGL context: {exc}")


@pytest.fixture(autouse=True, scope="session")
def _verify_ir_between_stages():
    old = pipeline.set_verify(True)
    yield
    pipeline.set_verify(old)


# Whole files and folders of long end-to-end runs, marked `slow` so that
# `pytest -m "not slow"` is a quick edit-test loop (CI and the README's command run them all).
# Single slow tests carry `@pytest.mark.slow` themselves.
SLOW_PATHS = (
    "tests/gl/test_texture_target.py",  # the GL suites again in a subprocess without compute shaders
    "tests/importers/",  # ONNX's node tests and model zoo files
    "tests/web/",  # headless Chromium
    "tests/parallel/",  # MPI ranks
    "tests/runtime/test_manifest_fuzz.py",  # thousands of manifest mutants
    "tests/cli/test_cli_resume.py",  # signals, checkpoints and resumed runs, each a few processes
)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = os.path.relpath(str(item.path), _ROOT).replace(os.sep, "/")
        if where.startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)
