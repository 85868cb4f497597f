"""Suite-wide switches: the IR checker runs between every compiler stage."""

from __future__ import annotations

import os

import pytest

from dlc.compiler import pipeline

# In this process and in every `python -m dlc` the tests start.
os.environ["DLC_VERIFY_IR"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _verify_ir_between_stages():
    old = pipeline.set_verify(True)
    yield
    pipeline.set_verify(old)
