"""ONNX tensor names -> .dl names, by one rule (README, "Importing ONNX models").

A name that is already a valid .dl name (letters, digits, `_`, not starting
with a digit, not a keyword) is kept. Otherwise every other character becomes
`_`, and a result that is empty, starts with a digit or is a keyword gets the
prefix `t_`. A result longer than MAX_NAME - 8 characters is cut there (so that `_2`, ...
still fit the language's limit). A result already taken gets `_2`, `_3`, ... appended.
"""

from __future__ import annotations

import re

from dlc.runtime.sizes import MAX_NAME

# Words that start a statement (a tensor so named could not be assigned), and the dtypes.
KEYWORDS = frozenset(
    {"input", "param", "const", "loss", "metric", "frozen", "def", "for", "return", "state", "update", "f32", "i32"}
)
MAX_BASE = MAX_NAME - 8  # room for the de-duplicating suffix
_VALID = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_0-9]+)*\Z")  # a param's name: a state_dict key


def escape(name: str, dotted: bool = False) -> str:
    """The rule without the de-duplication step; `dotted`: dots are kept (params' names,
    PyTorch's state_dict keys) where the name is otherwise valid."""
    valid = _DOTTED if dotted else _VALID
    if valid.match(name) and name.split(".")[0] not in KEYWORDS and len(name) <= MAX_BASE:
        return name
    if dotted and name[:1].isdigit() and _DOTTED.match("t_" + name) and len(name) + 2 <= MAX_BASE:
        return "t_" + name  # nn.Sequential's `0.weight`
    out = re.sub(r"[^A-Za-z_0-9]", "_", name)
    if not out or out[0].isdigit() or out in KEYWORDS:
        out = "t_" + out
    return out[:MAX_BASE]


class Names:
    """Hands out unique .dl names."""

    def __init__(self, reserved: set[str] = frozenset()) -> None:
        self.taken: set[str] = set(reserved)

    def new(self, onnx_name: str, dotted: bool = False) -> str:
        base = escape(onnx_name, dotted)
        name, k = base, 2
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name
