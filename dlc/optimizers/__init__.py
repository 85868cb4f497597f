"""Optimizers, as users name them (`dlc.SGD`, `dlc.Adam`, ...); they live in
`dlc.runtime.optimizers`, below the compiler that builds their update rules."""

from dlc.runtime.optimizers import (
    DEFAULT_LR,
    OPTIMIZERS,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    Momentum,
    Optimizer,
    RMSProp,
    make,
)

__all__ = [
    "DEFAULT_LR",
    "OPTIMIZERS",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Momentum",
    "Optimizer",
    "RMSProp",
    "make",
]
