"""dlc's errors (public API); they live in `dlc.runtime.errors`, below the compiler and the API."""

from dlc.runtime.errors import (
    CompileError,
    DataError,
    DlcError,
    Loc,
    RuntimeFailure,
    TrainingDiverged,
    did_you_mean,
    format_shape,
)

__all__ = [
    "CompileError",
    "DataError",
    "DlcError",
    "Loc",
    "RuntimeFailure",
    "TrainingDiverged",
    "did_you_mean",
    "format_shape",
]
