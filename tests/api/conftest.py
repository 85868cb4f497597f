"""Fixtures for the seeds' API tests: run a test on each backend (gl skips without a context)."""

from __future__ import annotations

import pytest

from dlc.runtime.errors import RuntimeFailure


def _gl_or_skip():
    from dlc.runtime.device import get_context

    try:
        get_context()
    except RuntimeFailure as exc:
        pytest.skip(str(exc))


@pytest.fixture(params=["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def backend(request):
    """The backend name; new arrays go there for the test's duration."""
    import dlc

    if request.param == "gl":
        _gl_or_skip()
    dlc.set_backend(request.param)
    yield request.param
    dlc.set_backend(None)


@pytest.fixture
def gl():
    """The GL backend for the test's arrays (skips without a context)."""
    import dlc

    _gl_or_skip()
    dlc.set_backend("gl")
    yield "gl"
    dlc.set_backend(None)
