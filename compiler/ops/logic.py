"""Logical ops over floats: nonzero (NaN included) is true; the result is 0 or 1."""

from __future__ import annotations
