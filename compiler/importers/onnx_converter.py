"""The state of one ONNX import and the .dl it writes: `Value` (one ONNX tensor, a known
constant or a named .dl tensor, in NCHW or NHWC), `Converter` (values, declarations,
statements, weights; the operands a handler asks for, converted once per layout) and the
.dl literal formatting. Shared by onnx_model (the driver) and every handler module.

Layouts: dlc's conv2d and pools are NHWC, ONNX is NCHW. A rank-4 value may be held in NHWC
(`Value.nhwc`); ops that need the other layout get a transpose, made once per value.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import numpy as np

from .fold_limit import FoldBudget
from .names import Names
from .onnx_checks import ImportError_
from .onnx_registry import supported_ops
from .sym_shapes import dl_shape, is_symbolic

INLINE_LIMIT = 16  # constants with more elements become params, never inlined in the text
INLINE_INF_LIMIT = 65536  # ... but those holding inf, up to this many (weights must be finite)
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


@dataclass
class Value:
    shape: tuple  # the ONNX (logical, NCHW) shape; a str is a symbolic dim
    name: str | None = None  # the .dl tensor holding it (in NHWC when nhwc)
    nhwc: bool = False
    const: np.ndarray | None = None  # the value, when known at import
    param: bool = False  # a float initializer (or made from one): a param when used as data
    onnx_name: str = ""
    i32: bool = False  # the .dl tensor is i32 (an integer input, or int(x)); else f32
    cache: dict = field(default_factory=dict)  # layout -> .dl name of a converted copy

    @property
    def rank(self) -> int:
        return len(self.shape)


def fmt_num(v: float) -> str:
    v = float(np.float32(v))
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    if np.isnan(v):
        raise ValueError(f"{v} has no .dl literal")
    s = str(np.float32(v))
    if abs(float(s)) > float(np.finfo(np.float32).max):  # float32's shortest text of its max reads beyond it
        s = repr(v)
    return s if "." in s or "e" in s else s + ".0"


def fmt_list(xs) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _literal(a: np.ndarray) -> str:
    if a.ndim == 0:
        return fmt_num(a)
    return "[" + ", ".join(_literal(x) for x in a) + "]"


class Converter:
    """State of one import: values, the .dl lines written so far, the weights."""

    def __init__(self, opset: int, names: Names, graph_outputs: set[str], at: str = "", budget=None) -> None:
        self.opset = opset
        self.at = at  # "FILE: " before errors, "" for a model given as a proto
        self.budget = budget or FoldBudget()
        self.names = names
        self.values: dict[str, Value] = {}
        self.decls: list[str] = []
        self.lines: list[str] = []
        self.weights: dict[str, np.ndarray] = {}
        self.states: dict[str, np.ndarray] = {}  # `state` name -> its initial value
        self.graph_outputs = graph_outputs
        self.node = None  # the node being converted, for errors
        self.freeze: tuple[str, ...] = ()  # globs: params written `frozen param`
        self.trainable: tuple[str, ...] | None = None  # globs: if given, every other param is frozen
        self.matched: set[str] = set()  # the globs that matched a param

    def frozen(self, onnx_name: str, name: str) -> bool:
        """Whether the param `name` (from the ONNX tensor `onnx_name`) is imported frozen: it
        matches a glob of `freeze`, or `trainable` is given and it matches none of its globs.
        A glob is matched against both names."""

        def matches(pattern):
            hit = fnmatch.fnmatchcase(onnx_name, pattern) or fnmatch.fnmatchcase(name, pattern)
            if hit:
                self.matched.add(pattern)
            return hit

        frozen = any([matches(p) for p in self.freeze])  # a list: every glob is tried (matched)
        trained = self.trainable is None or any([matches(p) for p in self.trainable])
        return frozen or not trained

    # -- errors ----------------------------------------------------------------
    def fail(self, what: str, list_ops: bool = True) -> ImportError_:
        """The error for the node being converted; `list_ops` adds the supported ops (for
        errors about what dlc cannot map, not about limits)."""
        n = self.node
        where = f"node '{n.name or n.output[0]}' ({n.op_type}, opset {self.opset})" if n else "model"
        ops = f"\nsupported ONNX ops: {', '.join(supported_ops())}" if list_ops else ""
        return ImportError_(f"{self.at}cannot import {where}: {what}{ops}")

    # -- writing ---------------------------------------------------------------
    def emit(self, onnx_name: str, expr: str, shape: tuple, nhwc: bool = False) -> Value:
        """`name = expr` for an ONNX tensor; a graph output held in NHWC gets a suffix
        so that its own name can hold it in ONNX's layout."""
        base = onnx_name + "_nhwc" if nhwc and onnx_name in self.graph_outputs else onnx_name
        name = self.names.new(base)
        self.lines.append(f"{name} = {expr}")
        v = Value(tuple(shape), name, nhwc, onnx_name=onnx_name)
        self.values[onnx_name] = v
        return v

    def temp(self, base: str, expr: str) -> str:
        name = self.names.new(base)
        self.lines.append(f"{name} = {expr}")
        return name

    def set_const(self, onnx_name: str, value: np.ndarray, param: bool) -> Value:
        v = Value(tuple(value.shape), const=value, param=param, onnx_name=onnx_name)
        self.values[onnx_name] = v
        return v

    def declare_const(self, base: str, a: np.ndarray, param: bool) -> str:
        """A .dl name holding the array `a`: a param (weights file) or an inline const."""
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.floating) and not np.issubdtype(a.dtype, np.integer) and a.dtype != bool:
            raise self.fail(f"constant '{base}' has element type {a.dtype}, which is not a number")
        name = self.names.new(base, dotted=param)
        # weights must be finite: a constant holding inf (a -inf mask) is written in the text
        infinite = not param and a.size <= INLINE_INF_LIMIT and np.isinf(a).any() and not np.isnan(a).any()
        if param or (a.size > INLINE_LIMIT and not infinite) or np.any(np.isnan(a)):
            self.weights[name] = np.array(
                a, dtype=np.float32, order="C"
            )  # a scalar stays [] (not ascontiguousarray's [1])
            frozen = "frozen " if not param or self.frozen(base, name) else ""  # a constant is never trained
            self.decls.append(f"{frozen}param {name}: {fmt_shape(a.shape)}")
        elif a.ndim == 0:
            self.decls.append(f"const {name} = {fmt_num(a)}")
        else:
            self.decls.append(f"const {name}: {fmt_shape(a.shape)} = {_literal(a)}")
        return name

    # -- operands --------------------------------------------------------------
    def data(self, v: Value) -> str:
        """v as an f32 .dl tensor in ONNX's layout (ONNX's integer and bool tensors are
        computed in f32 too: exact below 2^24; an i32 one is converted once)."""
        if v.name is None:
            if is_symbolic(v.const):  # a shape holding symbolic dims, used as data
                raise self.fail(
                    f"'{v.onnx_name}' holds the dims {fmt_shape(dl_shape(v.const))}, used as data: "
                    "symbolic dims are known only at run time"
                )
            v.name = self.declare_const(v.onnx_name or "c", v.const, v.param)
        if v.i32:
            if "f32" not in v.cache:
                v.cache["f32"] = self.temp(v.onnx_name + "_f32", f"float({v.name})")
            return v.cache["f32"]
        if not v.nhwc:
            return v.name
        if "nchw" not in v.cache:
            v.cache["nchw"] = self.temp(v.onnx_name + "_nchw", f"transpose({v.name}, perm={fmt_list(TO_NCHW)})")
        return v.cache["nchw"]

    def index(self, v: Value) -> str:
        """v as an i32 .dl tensor (gather's indices)."""
        if v.i32:
            return v.name
        if "i32" not in v.cache:
            v.cache["i32"] = self.temp(v.onnx_name + "_i32", f"int({self.data(v)})")
        return v.cache["i32"]

    def nhwc(self, v: Value) -> str:
        """A rank-4 v as a .dl tensor in NHWC."""
        if v.rank != 4:
            raise self.fail(f"expected a rank-4 (NCHW) tensor, got shape {list(v.shape)}")
        if v.nhwc:
            return v.name
        if "nhwc" not in v.cache:
            if v.const is not None:
                v.cache["nhwc"] = self.declare_const(v.onnx_name + "_nhwc", v.const.transpose(TO_NHWC), v.param)
            else:
                v.cache["nhwc"] = self.temp(
                    v.onnx_name + "_nhwc", f"transpose({self.data(v)}, perm={fmt_list(TO_NHWC)})"
                )
        return v.cache["nhwc"]

    def operand(self, v: Value, nhwc: bool) -> str:
        """v as an operand of a broadcasting op whose rank-4 operands are NHWC when `nhwc`."""
        if not nhwc:
            return self.data(v)
        if v.rank == 4:
            return self.nhwc(v)
        if v.rank == 0:
            return self.data(v)
        # A lower rank broadcasts against NCHW from the right: make it rank 4, then NHWC.
        full = (1,) * (4 - v.rank) + tuple(v.shape)
        if "b4" not in v.cache:
            if v.const is not None:
                a = v.const.reshape(full).transpose(TO_NHWC)
                v.cache["b4"] = self.declare_const(v.onnx_name + "_nhwc", a, v.param)
            else:
                r = self.temp(v.onnx_name + "_4d", f"reshape({self.data(v)}, {fmt_shape(full)})")
                v.cache["b4"] = self.temp(v.onnx_name + "_nhwc", f"transpose({r}, perm={fmt_list(TO_NHWC)})")
        return v.cache["b4"]

    def source(self, header: str) -> str:
        return "\n".join([header, *self.decls, "", *self.lines]) + "\n"
