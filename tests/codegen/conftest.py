"""The codegen tests that run shaders take the `gl` fixture (as tests/gl's): it skips with the
reason when no OpenGL context can be made."""

from __future__ import annotations

import pytest

from dlc.runtime.errors import RuntimeFailure


@pytest.fixture(scope="session")
def gl():
    from dlc.runtime.device import get_context

    try:
        return get_context()
    except RuntimeFailure as exc:
        pytest.skip(f"no OpenGL context: {exc}")
