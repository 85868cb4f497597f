"""ONNX tensor names -> .dl names, by one rule (README, "Importing ONNX models").

The rule itself, `escape`, is in runtime/saved_names.py: weights files are read back
through it (an imported param is saved under its ONNX name). A valid .dl name (letters,
digits, `_`, not starting with a digit, not a keyword; a param's may hold dots) is kept;
otherwise every other character becomes `_`, and a result that is empty, starts with a
digit or is a keyword gets the prefix `t_`, cut to MAX_NAME - 8 characters (so that `_2`,
... still fit the language's limit). A result already taken gets `_2`, `_3`, ... appended.
"""

from __future__ import annotations

from dlc.runtime.saved_names import KEYWORDS, MAX_BASE, escape

__all__ = ["KEYWORDS", "MAX_BASE", "Names", "escape", "saved_key"]


def saved_key(onnx_name: str, name: str) -> str:
    """The weights file's key for the param `name` imported from the initializer
    `onnx_name`: the ONNX name, where reading it back (`escape`) gives `name`; else (a
    name de-duplicated with `_2`) `name` itself."""
    return onnx_name if onnx_name and escape(onnx_name, dotted=True) == name else name


class Names:
    """Hands out unique .dl names."""

    def __init__(self, reserved: set[str] = frozenset()) -> None:
        self.taken: set[str] = set(reserved)
        self.asked: dict[str, str] = {}  # name handed out -> the name asked for (ONNX's)

    def new(self, onnx_name: str, dotted: bool = False) -> str:
        base = escape(onnx_name, dotted)
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        self.asked[name] = onnx_name
        return name
