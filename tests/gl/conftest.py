"""GL tests run real shaders (Mesa llvmpipe in CI): keep sizes small.

Tests that need a context take the `gl` or `backend` fixture, which skips with the reason
(what is missing and how to install it) when no context can be made.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

# The random graph generator is shared with tests/compiler.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compiler"))


@pytest.fixture(scope="session")
def backend(gl):
    from dlc.backends.gl import GLBackend

    return GLBackend()
