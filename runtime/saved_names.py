"""Names of params in weights files that are not .dl names (README, "Importing ONNX models").

`dlc import` saves each param under its ONNX initializer's name (PyTorch's state_dict key:
`0.weight`, `onnx::MatMul_12`) and writes the .dl with `escape(name, dotted=True)`, a valid
.dl name (`t_0.weight`, `onnx__MatMul_12`). A weights file is read back through the same rule:
a key that is no param of the model sets the param its escaped name names.
"""

from __future__ import annotations

import re

from .errors import DataError
from .sizes import MAX_NAME

# Words that start a statement (a tensor so named could not be assigned), and the dtypes.
KEYWORDS = frozenset(
    {"input", "param", "const", "loss", "metric", "frozen", "def", "for", "return", "state", "update", "f32", "i32"}
)
MAX_BASE = MAX_NAME - 8  # room for the de-duplicating suffix
_VALID = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_0-9]+)*\Z")  # a param's name: a state_dict key


def escape(name: str, dotted: bool = False) -> str:
    """`name` as a valid .dl name: kept if it is one (not a keyword, at most MAX_BASE
    characters); else every character outside [A-Za-z0-9_] becomes `_` and a result that is
    empty, starts with a digit or is a keyword gets the prefix `t_`, cut to MAX_BASE.
    `dotted`: dots are kept where the name is otherwise valid (params: `h.0.attn.weight`),
    and a first segment that starts with a digit gets the prefix (`0.weight` -> `t_0.weight`)."""
    valid = _DOTTED if dotted else _VALID
    if valid.match(name) and name.split(".")[0] not in KEYWORDS and len(name) <= MAX_BASE:
        return name
    if dotted and name[:1].isdigit() and _DOTTED.match("t_" + name) and len(name) + 2 <= MAX_BASE:
        return "t_" + name  # nn.Sequential's `0.weight`
    out = re.sub(r"[^A-Za-z_0-9]", "_", name)
    if not out or out[0].isdigit() or out in KEYWORDS:
        out = "t_" + out
    return out[:MAX_BASE]


def by_param_name(values: dict, params) -> dict:
    """`values` keyed by the model's names: a key that is not in `params` but whose escaped
    name is (an imported weights file's `0.weight` for the param `t_0.weight`) is renamed;
    other keys are kept (the caller refuses those that name no param). Two keys for one
    param are refused."""
    out = {}
    for key, v in values.items():
        name = key
        if key not in params and escape(key, dotted=True) in params:
            name = escape(key, dotted=True)
        if name in out:
            raise DataError(f"'{key}' and another array both hold the param '{name}'")
        out[name] = v
    return out
