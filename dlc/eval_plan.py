"""Session.eval's prepared path: one fetch list worked out once, then fed call after call.

An `EvalPlan` holds what an eval of a fixed list of names needs beside the feeds: the program
and its roots (a model's graph, or an artifact's eval program), the inputs they read, and the
dims binding of the last feeds it accepted. A call whose feeds are the same names, as NumPy
arrays of the dtypes the backend takes (float32; int32 for i32 inputs) and of the same shapes
as last time, skips the checks (nothing about them can have changed) and goes straight to the
backend, whose executor uploads into the input slots it keeps, runs its prepared launches and
reads the fetches back in one wait (runtime/readback.py). Any other call is checked in full
(`feeds.prepare`), as before.

`Session.eval`, `Session.predict` and `dlc eval` all come here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .runtime.errors import DlcError
from .runtime.feeds import prepare
from .runtime.optional import require

_FLOAT32 = np.dtype(np.float32)
_INT32 = np.dtype(np.int32)


class EvalPlan:
    """Evaluating `names` in `session`; `plan(feeds)` -> their values, in `names` order."""

    def __init__(self, session, names: Sequence[str]):
        self.names = tuple(names)
        self.backend = session.backend
        self.inputs = session.model.inputs
        self.dtypes = session.model.input_dtypes
        # The dtype a fed array has when the backend takes it as it is: int32 for i32 inputs.
        self._wanted = {n: _INT32 if self.dtypes.get(n) == "i32" else _FLOAT32 for n in self.inputs}
        artifact = session._artifact
        self._artifact = artifact
        if artifact is not None:
            self.program, self.roots, self.needed = artifact.eval_plan(list(names))
        else:
            session._roots(names)  # each name checked (did-you-mean)
            self.program = session._eval_program()  # dropout the identity, batch_norm's running stats
            self.roots = [self.program.names[n] for n in names]
            self.needed = _leaf_inputs(self.program, self.roots)
        # The last feeds accepted whole: (their names, their shapes, the dims they bind).
        self._accepted: tuple[tuple[str, ...], tuple[tuple[int, ...], ...], dict[str, int]] | None = None

    def __call__(self, feeds: Mapping[str, np.ndarray] | None) -> list[np.ndarray]:
        arrays, dims = self._checked(feeds)
        return self.backend.run(self.program, self.roots, arrays, dims)

    def _checked(self, feeds: Mapping[str, np.ndarray] | None) -> tuple[Mapping[str, np.ndarray], dict[str, int]]:
        """The feeds as the backend takes them and the dims they bind."""
        accepted = self._accepted
        if accepted is not None and feeds is not None and len(feeds) == len(accepted[0]):
            names, shapes, dims = accepted
            for name, shape in zip(names, shapes):
                value = feeds.get(name)
                if type(value) is not np.ndarray or value.dtype != self._wanted[name] or value.shape != shape:
                    break
            else:
                return feeds, dims
        arrays, dims = prepare(self.inputs, feeds, self.needed, self.dtypes)
        if self._artifact is not None:
            dims = self._artifact.fetch_dims(self.program, self.roots, dims)
        given = feeds or {}
        if len(arrays) == len(given) and all(
            type(given[n]) is np.ndarray and given[n].dtype == self._wanted[n] for n in arrays
        ):  # fed as the backend takes them: the next call of these shapes may skip the checks
            self._accepted = (tuple(arrays), tuple(a.shape for a in arrays.values()), dims)
        else:
            self._accepted = None
        return arrays, dims


def model_outputs(graph) -> list[str]:
    """The model's outputs, in the order the model names them: its named tensors, losses
    aside, that no other such tensor reads without needing more inputs (so `h` feeding
    `logits` is not one, and `prediction` stays one though `accuracy` reads it with the
    labels): the quadratic's `y`; a classifier's `probs`, `prediction` and `accuracy`
    (`dlc.compiler.ir.model_outputs`, which also names an artifact's `outputs` program)."""
    return require("dlc.compiler.ir").model_outputs(graph)


def outputs_for(session, fed: Sequence[str]) -> list[str]:
    """The outputs (`model_outputs`) that inputs `fed` suffice for; refused when none do. An
    artifact with an outputs program lists them in its manifest: no model.dl compiled then."""
    artifact = session._artifact
    listed = artifact.runner.manifest.get("outputs") if artifact is not None else None
    if listed:
        fed_set = set(fed)
        usable = [n for n in listed if artifact.eval_plan([n])[2] <= fed_set]
        if usable:
            return usable
    graph = session._output_graph()
    outputs = model_outputs(graph)
    if not outputs:
        raise DlcError("the model names no tensor besides its inputs, params and losses: give predict() fetches")
    fed_set = set(fed)
    usable = [n for n in outputs if _leaf_inputs(graph, [graph.names[n]]) <= fed_set]
    if not usable:
        need = sorted(_leaf_inputs(graph, [graph.names[outputs[0]]]) - fed_set)
        raise DlcError(
            f"predict() computes the model's outputs ({', '.join(outputs)}), and each needs an input "
            f"not fed: feed {', '.join(repr(n) for n in need)} for '{outputs[0]}', or give fetches"
        )
    return usable


def _leaf_inputs(graph, roots) -> set[str]:
    """The inputs and leaves `roots` read (`dlc.compiler.ir.leaf_inputs`; the IR module on first use:
    an artifact's session runs without the compiler)."""
    return require("dlc.compiler.ir").leaf_inputs(graph, roots)
