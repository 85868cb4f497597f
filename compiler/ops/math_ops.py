"""Rounding, logarithm/exponential helpers, trigonometric and hyperbolic functions, mod:
one elementwise entry each."""

from __future__ import annotations
