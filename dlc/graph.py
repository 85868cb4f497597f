"""dlc.Graph: the seeds' graph builder (deeplearn.js `Graph`) in Python.

    g = dlc.Graph()
    x = g.placeholder("x", ["B"])
    a = g.variable("a", "normal")            # an initializer, or an array
    y = g.add(a * x ** 2, g.constant(1.0), name="y")
    g.loss("cost", g.mean_squared_cost(y, g.placeholder("y_label", ["B"])))
    sess = dlc.Session(g)

Every op of the language is a method (snake_case; the seeds' camelCase names
map over: meanSquaredCost -> mean_squared_cost), and Tensors take + - * / @ **
and unary -. Nodes are built through the same functions as the .dl language,
so the IR is the same whichever way a model is written. Shapes are checked as
each node is made; an error names the Python line that made it.
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.functions import REQUIRED, Function, Param
from dlc.compiler.initializers import INITIALIZERS, default_init
from dlc.compiler.ir import Shape, format_graph
from dlc.compiler.registry import FUNCTIONS
from dlc.compiler.seed_names import suggest
from dlc.runtime.dims import product as dim_product

from .model import Model
from .runtime.errors import CompileError, Loc

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_ROOT = os.path.dirname(_HERE)


def _call_site() -> Loc:
    """The first stack frame outside dlc: the user's line that made the node."""
    frame = inspect.currentframe()
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_HERE + os.sep):
            info = inspect.getframeinfo(frame, context=1)
            col = 1
            positions = getattr(info, "positions", None)
            if positions is not None and positions.col_offset is not None:
                col = positions.col_offset + 1
            text = info.code_context[0].rstrip("\n") if info.code_context else ""
            return Loc(frame.f_code.co_filename, frame.f_lineno, col, text)
        frame = frame.f_back
    return Loc("<python>", 0, 0)


class Tensor:
    """A node of a Graph: connectivity and shape only, no data (as in the seeds). Arithmetic
    operators (+ - * / @ ** and unary -) add ops to its graph.

    >>> g = dlc.Graph()
    >>> x = g.placeholder("x", ["B", 3])
    >>> (x * 2 + 1).shape
    ('B', 3)
    """

    __slots__ = {
        "graph": "The Graph this tensor belongs to.\n\n>>> x.graph is g\nTrue",
        "index": "The node's number in its graph's IR.\n\n>>> g.placeholder('x', [3]).index\n0",
    }

    def __init__(self, graph: Graph, index: int):
        self.graph, self.index = graph, index

    @property
    def shape(self) -> Shape:
        """Its shape, inferred as ops are added: ints and symbolic dims (strings).

        >>> g.matmul(g.placeholder("x", ["B", 3]), g.variable("w", "glorot", shape=[3, 1])).shape
        ('B', 1)
        """
        return self.graph._b.shape(self.index)

    @property
    def name(self) -> str | None:
        """The name it was given (a leaf's, `Graph.name`'s, `name=`), or None.

        >>> g.placeholder("x", [3]).name
        'x'
        """
        for n, i in self.graph._b.names.items():
            if i == self.index:
                return n
        return None

    def __repr__(self) -> str:
        shown = self.name or f"%{self.index}"
        return f"Tensor({shown}, shape={list(self.shape)})"

    def _op(self, fn: str, a: Any, b: Any) -> Tensor:
        return self.graph._call(fn, (a, b), {})

    def __add__(self, o):
        return self._op("add", self, o)

    def __radd__(self, o):
        return self._op("add", o, self)

    def __sub__(self, o):
        return self._op("sub", self, o)

    def __rsub__(self, o):
        return self._op("sub", o, self)

    def __mul__(self, o):
        return self._op("mul", self, o)

    def __rmul__(self, o):
        return self._op("mul", o, self)

    def __truediv__(self, o):
        return self._op("div", self, o)

    def __rtruediv__(self, o):
        return self._op("div", o, self)

    def __matmul__(self, o):
        return self._op("matmul", self, o)

    def __rmatmul__(self, o):
        return self._op("matmul", o, self)

    def __pow__(self, o):
        return self._op("pow", self, o)

    def __rpow__(self, o):
        return self._op("pow", o, self)

    def __neg__(self):
        return self.graph._call("neg", (self,), {})


# The seeds' names that are not the language's (deeplearn.js Graph methods).
SEED_ALIASES = {
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "mean_squared_cost": "mean_squared",
    "softmax_cross_entropy_cost": "softmax_cross_entropy",
    "reduce_sum": "sum",
    "exponential": "exp",
    "elementwise_mul": "mul",
}


class Graph:
    """Placeholders, variables, constants and ops; `build()` gives the Model. Every function
    of the language is a method (`g.matmul`, `g.relu`, ...), as are the seeds' names
    (`g.mean_squared_cost`).

    >>> g = dlc.Graph()
    >>> x = g.placeholder("x", ["B", 3])
    >>> y = g.name("y", g.matmul(x, g.variable("w", "glorot", shape=[3, 1])))
    >>> cost = g.loss("cost", g.mean_squared_cost(y, g.placeholder("label", ["B", 1])))
    >>> sess = dlc.Session(g)
    """

    def __init__(self) -> None:
        self._b = GraphBuilder()

    # -- leaves ------------------------------------------------------------------
    def placeholder(self, name: str, shape: Sequence[int | str], dtype: str = "f32") -> Tensor:
        """An input; `dtype="i32"` for integer ids (as `input name: i32[...]`).

        >>> x = g.placeholder("x", ["B", 3])
        """
        loc = _call_site()
        if dtype not in ("f32", "i32"):
            raise CompileError(f"placeholder '{name}': dtype must be 'f32' or 'i32', not {dtype!r}", loc)
        return Tensor(self, self._leaf(lambda: self._b.input(name, _shape(shape, loc), loc, dtype=dtype), name, loc))

    def variable(self, name: str, init: Any = None, shape: Sequence[int] | None = None) -> Tensor:
        """A trainable param: `init` is an array (its value), a number, an initializer name
        ("zeros", "ones", "glorot", "he", "normal", "uniform") or a tuple such as
        ("normal", mean, std); with a name or None, `shape` is needed (default []).

        >>> w = g.variable("w", "glorot", shape=[3, 1])
        >>> m = g.variable("m", dlc.randn([1, 3], seed=0))
        """
        loc = _call_site()
        if isinstance(init, (np.ndarray, list)) or hasattr(init, "numpy"):
            value = np.asarray(init.numpy() if hasattr(init, "numpy") else init, dtype=np.float32)
            shp, spec = value.shape, ("array", tuple(float(v) for v in value.ravel()))
        else:
            shp = _shape(shape or (), loc)
            spec = _init_spec(init, shp, loc)
        return Tensor(self, self._leaf(lambda: self._b.param(name, shp, spec, loc), name, loc))

    def constant(self, value: Any, name: str | None = None) -> Tensor:
        """A fixed value (a number, nested lists or an array), named when `name` is given.

        >>> c = g.constant([1.0, 2.0])
        """
        loc = _call_site()
        arr = np.asarray(value, dtype=np.float64)
        i = self._b.const(arr.ravel().tolist() if arr.ndim else float(arr), arr.shape, loc)
        if name:
            self._b.declare(name, i, loc)
        return Tensor(self, i)

    def _leaf(self, make, name: str, loc: Loc) -> int:
        if name in self._b.names:
            raise CompileError(f"duplicate name '{name}'", loc)
        return make()

    # -- naming ------------------------------------------------------------------
    def name(self, name: str, t: Tensor) -> Tensor:
        """Give `t` a name so it can be fetched (like `NAME = EXPR` in the language).

        >>> y = g.name("y", g.matmul(x, w))
        """
        self._b.declare(name, self._index(t, _call_site()), _call_site())
        return t

    def loss(self, name: str, t: Tensor) -> Tensor:
        """Name `t` and mark it a loss that training can minimize (like `loss NAME = EXPR`).

        >>> cost = g.loss("cost", g.mean_squared_cost(y, label))
        """
        loc = _call_site()
        i = self._index(t, loc)
        self._b.declare(name, i, loc)
        self._b.loss(name, i, loc)
        return t

    # -- ops ---------------------------------------------------------------------
    def _index(self, v: Any, loc: Loc) -> int:
        if isinstance(v, Tensor):
            if v.graph is not self:
                raise CompileError("a tensor from another Graph was passed", loc)
            return v.index
        if isinstance(v, (int, float, np.floating, np.integer)):
            return self._b.const(float(v), (), loc)
        if isinstance(v, (list, tuple, np.ndarray)):
            arr = np.asarray(v, dtype=np.float64)
            return self._b.const(arr.ravel().tolist(), arr.shape, loc)
        raise CompileError(f"expected a Tensor or a number, got {type(v).__name__}", loc)

    def _call(self, fname: str, args: tuple, kwargs: dict) -> Tensor:
        loc = _call_site()
        name = kwargs.pop("name", None)
        values = []
        for p, v in bind_args(fname, args, kwargs, loc):
            if p.kind == "tensor":
                v = self._index(v, loc)
            elif p.kind == "tensors":
                v = [self._index(t, loc) for t in v]
            values.append(v)
        i = FUNCTIONS[fname].impl(self._b, loc, *values)
        if isinstance(i, tuple):  # several results (split): one Tensor each
            if name:
                raise CompileError(f"{fname} gives {len(i)} tensors: name them one by one", loc)
            return tuple(Tensor(self, j) for j in i)
        if name:
            self._b.declare(name, i, loc)
        return Tensor(self, i)

    def argmax_equals(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """1.0 where argmax(a) == argmax(b) along the last axis (the seeds' argmaxEquals).

        >>> correct = g.argmax_equals(logits, one_hot_labels, name="correct")
        """
        return self._call("eq", (self._call("argmax", (a,), {}), self._call("argmax", (b,), {})), {"name": name})

    def __getattr__(self, attr: str):
        fname = SEED_ALIASES.get(attr, attr)
        if fname not in FUNCTIONS:
            raise AttributeError(f"Graph has no op {attr!r}{suggest(attr, FUNCTIONS)}")
        return lambda *args, **kwargs: self._call(fname, args, dict(kwargs))

    # -- result ------------------------------------------------------------------
    def build(self) -> Model:
        """The graph as a dlc.Model (what dlc.compile gives for a .dl file).

        >>> g.build().params
        {'w': (3, 1)}
        """
        model = Model(self._b.build(), path="<graph>")
        model.origin = weakref.ref(self)  # lets a seeds-style Session call check its Tensors' graph
        return model

    def __str__(self) -> str:
        return format_graph(self._b.build())


def bind_args(fname: str, args: tuple, kwargs: dict, loc: Loc | None) -> list[tuple[Param, Any]]:
    """Match a call's arguments to the language function's parameters, in their order, with
    defaults filled in; lists become tuples. Tensor arguments are left as they were given."""
    fn: Function = FUNCTIONS[fname]
    if len(args) > len(fn.params):
        raise CompileError(f"{fname} takes at most {len(fn.params)} arguments, got {len(args)}", loc)
    bound = dict(zip((p.name for p in fn.params), args))
    for k, v in kwargs.items():
        if k not in {p.name for p in fn.params}:
            raise CompileError(f"{fname} has no argument '{k}'", loc)
        if k in bound:
            raise CompileError(f"{fname} got argument '{k}' twice", loc)
        bound[k] = v
    out = []
    for p in fn.params:
        if p.name not in bound:
            if p.default is REQUIRED:
                raise CompileError(f"{fname} is missing argument '{p.name}'", loc)
            out.append((p, p.default))
            continue
        v = bound[p.name]
        if p.kind == "tensors":
            v = list(v)
        elif p.kind == "dims" or (p.kind != "tensor" and isinstance(v, list)):
            v = tuple(v)
        out.append((p, v))
    return out


def _shape(shape, loc) -> Shape:
    out = []
    for d in shape:
        if isinstance(d, (int, np.integer)) and d > 0:
            out.append(int(d))
        elif isinstance(d, str) and d.isidentifier():
            out.append(d)
        elif isinstance(d, str) and all(p.isidentifier() or (p.isdigit() and int(p) > 0) for p in d.split("*")):
            out.append(dim_product(d))  # a product such as "B*T", in its canonical form
        else:
            raise CompileError(f"a dim is a positive int, a symbolic name or a product (B*T), got {d!r}", loc)
    return tuple(out)


def _init_spec(init, shape, loc) -> tuple:
    if init is None:
        return default_init(shape)
    if isinstance(init, (int, float, np.number)) and not isinstance(init, bool):
        return ("value", float(init))
    if isinstance(init, str):
        init = (init,)
    if isinstance(init, tuple) and init and init[0] in INITIALIZERS:
        params = INITIALIZERS[init[0]]
        args = list(init[1:]) + [d for _, d in params[len(init) - 1 :]]
        return (init[0], *map(float, args))
    raise CompileError(f"unknown initializer {init!r}", loc)
