"""Suite-wide switches: the IR checker runs between every compiler stage, and the tests never
read or write the user's program binary cache (a cached binary would also hide the compiles
some tests count); tests of the cache turn it on in a process of their own with a temporary
DLC_CACHE_DIR."""

from __future__ import annotations

import os

import pytest

from dlc.compiler import pipeline

# In this process and in every `python -m dlc` the tests start.
os.environ["DLC_VERIFY_IR"] = "1"
os.environ["DLC_PROGRAM_BINARY_CACHE"] = "0"
os.environ["DLC_COMPILE_CACHE"] = "0"  # compiled models and programs (compiler/compile_cache.py): same


@pytest.fixture(autouse=True, scope="session")
def _verify_ir_between_stages():
    old = pipeline.set_verify(True)
    yield
    pipeline.set_verify(old)
