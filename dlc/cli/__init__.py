"""The `dlc` command line (SPEC section 2): check, compile, train, eval, generate, plot-model,
import, export, info. `main.py` parses and dispatches; each command is a module of its own
(`dlc/cli/COMMAND.py`), imported only when it runs; `options.py` declares the flags several
commands share; `models.py` opens the model and session a command runs on.
"""

from __future__ import annotations

from typing import Any

from ..optional import require
from .main import COMMANDS, main

__all__ = ["COMMANDS", "main"]


def __getattr__(name: str) -> Any:
    # `cli.STAGES`: the compiler's stage names (dlc.compiler.pipeline.STAGE_NAMES), which
    # `dlc compile --emit` takes; importing the compiler only when asked.
    if name == "STAGES":
        return require("dlc.cli.compile").STAGES
    raise AttributeError(f"module 'dlc.cli' has no attribute {name!r}")
