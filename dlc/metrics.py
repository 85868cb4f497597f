"""Which named tensors of a model are metrics: reported beside the loss by `dlc train --val`
and `Session.fit(validation_data=)` (as `val_NAME`), and checkable by callbacks.

Declared with `metric NAME = EXPR`; by convention also a scalar tensor named `accuracy`, or
under `metric.` (`metric.mae = ...`, reported as `mae`: how an artifact, which keeps no
statements, still reports them); `--metric NAME` / `metrics=` name others (any scalar tensor).
"""

from __future__ import annotations

from collections.abc import Sequence

from .runtime.errors import DlcError, did_you_mean

PREFIX = "metric."


def metric_tensors(model, names: Sequence[str] | None = None) -> dict[str, str]:
    """Reported name -> tensor name: `names` (checked: scalar named tensors, not losses), or
    by the convention above when None."""
    tensors = model.tensors
    if names is None:
        declared = list(getattr(model, "metrics", None) or ())  # an artifact's model has none
        names = declared + [
            n
            for n, shape in tensors.items()
            if shape == () and (n == "accuracy" or n.startswith(PREFIX)) and n not in declared
        ]
    out: dict[str, str] = {}
    for n in names:
        if n not in tensors or n in model.losses:
            scalars = [t for t, s in tensors.items() if s == () and t not in model.losses]
            why = "is a loss (reported as val_loss)" if n in model.losses else "is not a named tensor of the model"
            raise DlcError(f"{model.path}: metric '{n}' {why}{did_you_mean(n, scalars)}")
        if tensors[n] != ():
            raise DlcError(f"{model.path}: metric '{n}' must be a scalar, but its shape is {list(tensors[n])}")
        out[n[len(PREFIX) :] if n.startswith(PREFIX) and len(n) > len(PREFIX) else n] = n
    return out
