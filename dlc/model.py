"""Model: a compiled .dl model (its IR and where it came from)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from dlc.compiler.ir import Graph, Shape


@dataclass
class Model:
    """A compiled .dl model (`dlc.compile`): `inputs`, `params`, `tensors`, `losses` map names to
    shapes; `graph` is its IR, `source` its text, `path` where it came from; `summary()`.

    >>> model = dlc.compile("samples/mlp_digits.dl")
    >>> model.params["W1"]
    (64, 64)
    """

    graph: Graph
    source: str = ""
    path: str = "<model>"

    @property
    def inputs(self) -> dict[str, Shape]:
        return {n: self.graph.shape(n) for n in self.graph.inputs}

    @property
    def params(self) -> dict[str, Shape]:
        return {n: self.graph.shape(n) for n in self.graph.params}

    @property
    def tensors(self) -> dict[str, Shape]:
        """Every named tensor that is neither an input nor a param (losses included)."""
        skip = set(self.graph.inputs) | set(self.graph.params)
        return {n: self.graph.node(n).shape for n in self.graph.names if n not in skip}

    @property
    def losses(self) -> dict[str, Shape]:
        return {n: () for n in self.graph.losses}

    @property
    def metrics(self) -> dict[str, Shape]:
        """The `metric NAME = EXPR` tensors (scalars reported beside the loss); named tensors too."""
        return {n: () for n in self.graph.metrics}

    def summary(self, print_fn=print) -> None:
        """Print each layer (the dotted path a `def` call gives its params; '(top level)' for
        plain names) with its params, their shapes and count, then the totals, as Keras's
        `model.summary()` does; `print_fn` receives the text (`dlc info MODEL` prints the same).

        >>> dlc.compile("samples/mlp_digits.dl").summary()
        """
        from .report import param_summary

        frozen = {p for p in self.graph.params if self.graph.node(p).attr("frozen")}
        print_fn(param_summary(self.params, frozen))

    def __repr__(self) -> str:
        return (
            f"Model({self.path!r}, inputs={list(self.inputs)}, params={list(self.params)}, losses={list(self.losses)})"
        )


def compile(source: str | os.PathLike, *, name: str | None = None) -> Model:
    """Compile a .dl model from a path or from source text. Raises dlc.CompileError."""
    from dlc.compiler.lang import compile_source

    text, path = source, name or "<model>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and source.endswith(".dl")):
        from dlc.compiler.parser import read_source

        path = os.fspath(source)
        text = read_source(path)  # bytes that are not UTF-8: a CompileError at their line:col
    return Model(compile_source(text, path), text, path)
