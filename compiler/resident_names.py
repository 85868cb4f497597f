"""The names of a resident step's leaves (compiler/resident.py): the session's warm start needs
them, and none of the rewrite's machinery."""

from __future__ import annotations

DATA = "$data$"
IDX = "$idx"


def data_name(name: str) -> str:
    """The state leaf that holds all of input `name`'s examples."""
    return DATA + name
