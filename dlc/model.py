"""Model: a compiled .dl model (its IR and where it came from)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from dlc.compiler import compile_cache
from dlc.compiler.ir import Graph, Shape
from dlc.runtime.optional import require
from dlc.runtime.source_text import read_source


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
        """Each input's name -> its shape (symbolic dims as strings).

        >>> dlc.compile("samples/quadratic.dl").inputs
        {'x': ('B',), 'y_label': ('B',)}
        """
        return {n: self.graph.shape(n) for n in self.graph.inputs}

    @property
    def input_dtypes(self) -> dict[str, str]:
        """Each input's element type, "f32" or "i32".

        >>> dlc.compile("samples/char_gpt.dl").input_dtypes
        {'tokens': 'i32', 'targets': 'i32'}
        """
        return {n: self.graph.dtype(n) for n in self.graph.inputs}

    @property
    def params(self) -> dict[str, Shape]:
        """Each trainable param's name -> its shape.

        >>> dlc.compile("samples/quadratic.dl").params
        {'a': (), 'b': (), 'c': ()}
        """
        return {n: self.graph.shape(n) for n in self.graph.params}

    @property
    def states(self) -> dict[str, Shape]:
        """The model's state (`state NAME`, batch_norm's running statistics, the random ops'
        step counter `$step`): saved and loaded with the params. The random ops' `$seed` is
        the session's seed, kept by checkpoints but not by weights files.

        >>> list(dlc.compile("samples/resnet_bn.dl").states)[:2]
        ['stem.mean', 'stem.var']
        """
        return {n: self.graph.shape(n) for n in self.graph.states if n != "$seed"}

    @property
    def tensors(self) -> dict[str, Shape]:
        """Every named tensor that is neither an input nor a param (losses included); not the
        random ops' `$seed` and `$step` (fetchable by name all the same).

        >>> dlc.compile("samples/quadratic.dl").tensors
        {'y': ('B',), 'cost': ()}
        """
        skip = set(self.graph.inputs) | set(self.graph.params)
        return {n: self.graph.node(n).shape for n in self.graph.names if n not in skip and not n.startswith("$")}

    @property
    def losses(self) -> dict[str, Shape]:
        """Each loss's name -> its shape (a scalar: ()).

        >>> dlc.compile("samples/quadratic.dl").losses
        {'cost': ()}
        """
        return {n: () for n in self.graph.losses}

    @property
    def metrics(self) -> dict[str, Shape]:
        """The `metric NAME = EXPR` tensors (scalars reported beside the loss); named tensors too.

        >>> dlc.compile("input x: [B]\\nloss cost = mean(x)\\nmetric mae = mean(abs(x))\\n").metrics
        {'mae': ()}
        """
        return {n: () for n in self.graph.metrics}

    def summary(self, print_fn=print) -> None:
        """Print each layer (the dotted path a `def` call gives its params; '(top level)' for
        plain names) with its params, their shapes and count, then the totals, as Keras's
        `model.summary()` does; `print_fn` receives the text (`dlc info MODEL` prints the same).

        >>> dlc.compile("samples/mlp_digits.dl").summary()
        """

        frozen = {p for p in self.graph.params if self.graph.node(p).attr("frozen")}
        print_fn(require("dlc.report").param_summary(self.params, frozen))

    def __repr__(self) -> str:
        return (
            f"Model({self.path!r}, inputs={list(self.inputs)}, params={list(self.params)}, losses={list(self.losses)})"
        )


def compile(source: str | os.PathLike, *, name: str | None = None) -> Model:
    """Compile a .dl model from a path or from source text (`name`: the path its errors
    show for source text). Raises dlc.CompileError.

    >>> model = dlc.compile("samples/quadratic.dl")
    >>> model.params
    {'a': (), 'b': (), 'c': ()}
    """

    text, path = source, name or "<model>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source and source.endswith(".dl")):
        path = os.fspath(source)
        text = read_source(path)
    # A model compiled before comes from dlc's compile cache on disk: no lark, no parse.
    graph = compile_cache.load_model(text, path) if compile_cache.enabled() else None
    if graph is None:
        # lark and the front end on a miss only (the start-up-heavy compiler)
        graph = require("dlc.compiler.lang").compile_source(text, path)
        if compile_cache.enabled():
            compile_cache.store_model(text, path, graph)
    return Model(graph, text, path)
