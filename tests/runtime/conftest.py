"""GL fixtures: tests that need a context get `gl_context`, which skips with the reason if none."""

from __future__ import annotations

import pytest

from dlc.runtime.errors import RuntimeFailure


@pytest.fixture(scope="session")
def gl_context():
    """The process's GL context, or a skip saying what is missing."""
    from dlc.runtime.device import get_context

    try:
        return get_context()
    except RuntimeFailure as exc:
        pytest.skip(str(exc))
