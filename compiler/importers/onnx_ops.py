"""ONNX op handlers: each writes the .dl statements for one node.

A handler gets the Converter, the node, its input Values (None for an
omitted optional input) and its attributes; it calls `c.emit` for each output.
Nodes whose inputs are all known constants are folded with onnx's reference
evaluator instead (Shape, ConstantOfShape, Range and the like then never reach
the .dl text). Lowerings to existing dlc ops are exact (up to float rounding).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from . import sym_shapes as sym
from .onnx_converter import TO_NHWC, Converter, Value, fmt_list, fmt_num, fmt_shape
from .onnx_registry import FOLDED_ONLY, HANDLERS, handler, supported_ops  # noqa: F401  (also used from here)
from .onnx_types import FLOAT_TYPES, INT_TYPES, type_name

# ops whose handler takes a shape constant holding symbolic dims (sym_shapes) as its shape
SYMBOLIC_SHAPE_OPS = ("Reshape", "Expand", "ConstantOfShape", "Range")


# -- driving -------------------------------------------------------------------------


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def convert_node(c: Converter, node) -> None:
    if id(node) in c.skip:  # folded into the node before it
        return
    if node.domain not in ("", "ai.onnx"):
        raise c.fail(f"op domain '{node.domain}' is not supported (only the default ONNX domain)")
    ins = []
    for name in node.input:
        if not name:
            ins.append(None)
        elif name not in c.values:
            raise c.fail(f"input '{name}' is not computed before this node")
        else:
            ins.append(c.values[name])
    attrs = _attrs(node)
    if node.op_type in ("Shape", "Size") and ins[0].const is None:
        _shape_const(c, node, ins[0], attrs)
        return
    present = [v for v in ins if v is not None]
    if all(v.const is not None for v in present) and node.op_type not in ("Dropout", "If"):
        if any(sym.is_symbolic(v.const) for v in present):
            results = sym.fold(c, node, ins, attrs)
            if results is not None:
                for name, r in zip([o for o in node.output if o], results):
                    c.set_const(name, r, False)
                return
            if node.op_type not in SYMBOLIC_SHAPE_OPS:
                raise c.fail(f"{node.op_type} of a shape holding symbolic dims cannot be computed at import")
        elif not any(v.param for v in present) or node.op_type not in HANDLERS:
            _fold(c, node, ins)
            return
        # A node reading a param is written out, not folded: the param keeps its name and
        # trains as itself (wpe.weight, not the rows a Gather of positions took at import).
    fn = HANDLERS.get(node.op_type)
    if fn is None:
        if node.op_type in FOLDED_ONLY:
            raise c.fail(f"{node.op_type} is supported only when its inputs are known at import")
        raise c.fail(f"op {node.op_type} is not supported")
    fn(c, node, ins, attrs)


def _shape_const(c, node, x: Value, attrs) -> None:
    """Shape and Size of a run-time tensor: a constant, a shape constant where x's shape
    holds symbolic dims (sym_shapes)."""
    shape = sym.shape_array(x.shape)
    if node.op_type == "Size":
        c.set_const(node.output[0], sym.settle(np.array(sym.product(shape), dtype=object)), False)
        return
    start, end = attrs.get("start", 0), attrs.get("end", None)
    c.set_const(node.output[0], shape[start:end], False)


def _fold(c, node, ins) -> None:
    feeds, inputs = {}, []
    for name, v in zip(node.input, ins):
        if v is not None:
            feeds[name] = v.const
            inputs.append(
                helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.const.dtype), v.const.shape)
            )
    outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
    c.budget.charge(c, node, ins)  # before computing: the outputs' sizes come from their shapes
    graph = helper.make_graph([node], "fold", inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c.opset)])
    try:
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:
        raise c.fail(f"folding this constant node failed: {e}") from None
    param = any(v is not None and v.param for v in ins)
    for name, r in zip([o for o in node.output if o], results):
        r = np.asarray(r)
        c.set_const(name, r, param and np.issubdtype(r.dtype, np.floating))


def batch_norms_after_convs(nodes: list, graph_outputs: set[str]) -> dict[str, object]:
    """Conv output -> the BatchNormalization that is its only use: the Conv handler folds
    the normalization into its filter and bias when the statistics are constants."""
    uses: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            uses.setdefault(i, []).append(n)
    out = {}
    for n in nodes:
        if n.op_type != "Conv" or n.output[0] in graph_outputs:
            continue
        after = uses.get(n.output[0], [])
        if (
            len(after) == 1
            and after[0].op_type == "BatchNormalization"
            and after[0].input[0] == n.output[0]
            and not _attrs(after[0]).get("training_mode")
        ):
            out[n.output[0]] = after[0]
    return out


def _fold_bn(c, w: np.ndarray, b: np.ndarray | None, bn) -> tuple[np.ndarray, np.ndarray] | None:
    """(filter, bias) with the BatchNormalization `bn` folded in; None if its stats are
    not constants, its scale or shift is a trainable param (written out, it fine-tunes under
    its own name, as in PyTorch), or it has more outputs in use."""
    stats = [c.values.get(i) for i in bn.input[1:5]]
    if any(v is None or v.const is None for v in stats) or any(o in c.used for o in bn.output[1:] if o):
        return None
    if any(v.param for v in stats[:2]):
        return None
    scale, shift, mean, var = (v.const.astype(np.float64) for v in stats)
    k = scale / np.sqrt(var + _attrs(bn).get("epsilon", 1e-5))
    b = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
    return (
        (w.astype(np.float64) * k[:, None, None, None]).astype(np.float32),
        ((b - mean) * k + shift).astype(np.float32),
    )


# -- helpers -------------------------------------------------------------------------


def _out_shape(c: Converter, name: str, known: tuple | None = None) -> tuple:
    """The shape of the output `name`: ONNX's inferred one, its dims renamed to .dl dims. A
    handler that computed the shape itself passes it as `known`: then the inferred shape's
    symbolic dims (`unk__3`, or `B` where the handler found `B*T`) are taken to mean those
    dims from here on."""
    inferred = c.shapes.get(name)
    if known is not None:
        if inferred is not None and len(inferred) == len(known):
            for d, k in zip(inferred, known):
                if isinstance(d, str) and d not in c.dim_names and d not in c.input_dims:
                    c.dim_names[d] = k
        return tuple(known)
    if inferred is None:
        raise c.fail(f"the shape of '{name}' is unknown (ONNX shape inference gave none)")
    shape = tuple(d if isinstance(d, int) else c.dim_names.get(d, d) for d in inferred)
    unknown = [d for d in shape if isinstance(d, str) and d not in c.known_dims and not _is_product(c, d)]
    if unknown:
        raise c.fail(f"the shape of '{name}' has dims ONNX shape inference could not name ({', '.join(unknown)})")
    return shape


def _is_product(c, d: str) -> bool:
    p = sym.Dim.parse(d)
    return isinstance(p, int) or all(n in c.known_dims for n in p.names)


def _one_out(c, node) -> str:
    extra = [o for o in node.output[1:] if o and o in c.used]
    if extra:
        raise c.fail(f"output(s) {', '.join(extra)} are not supported (only the first output)")
    return node.output[0]


def _const_ints(c, v: Value | None, what: str) -> list[int] | None:
    if v is None:
        return None
    if v.const is None:
        raise c.fail(f"{what} must be known at import (a constant), not computed at run time")
    if sym.is_symbolic(v.const):
        raise c.fail(f"{what} must be known ints at import, got the dims {fmt_shape(sym.dl_shape(v.const))}")
    return [int(x) for x in np.asarray(v.const).reshape(-1)]


def _pick_nhwc(c, ins, out_rank: int) -> bool:
    return out_rank == 4 and any(v is not None and v.nhwc for v in ins)


def _elementwise(c, node, ins, expr: Callable[..., str]) -> None:
    out = _one_out(c, node)
    shape = _out_shape(c, out, sym.broadcast(c, *[v.shape for v in ins], strict=False))
    nhwc = _pick_nhwc(c, ins, len(shape))
    c.emit(out, expr(*[c.operand(v, nhwc) for v in ins]), shape, nhwc)


def _nhwc_axis(axis: int) -> int:
    return TO_NHWC.index(axis)


def _norm_axis(c, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise c.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


# -- elementwise ---------------------------------------------------------------------

UNARY = {
    "Relu": "relu({})",
    "Sigmoid": "sigmoid({})",
    "Tanh": "tanh({})",
    "Exp": "exp({})",
    "Log": "log({})",
    "Sqrt": "sqrt({})",
    "Abs": "abs({})",
    "Neg": "(-{})",
    "Reciprocal": "reciprocal({})",
    "Softplus": "softplus({})",
    "Sin": "sin({})",
    "Cos": "cos({})",
    "Sign": "sign({})",
    "Softsign": "softsign({})",
    "Erf": "erf({})",
    "Floor": "floor({})",
    "Ceil": "ceil({})",
    "Round": "round({})",
    "Tan": "tan({})",
    "Asin": "asin({})",
    "Acos": "acos({})",
    "Atan": "atan({})",
    "Sinh": "sinh({})",
    "Cosh": "cosh({})",
    "Mish": "mish({})",
    "Not": "logical_not({})",
    "IsNaN": "ne({0}, {0})",  # NaN alone compares unequal to itself
}
BINARY = {
    "Add": "({} + {})",
    "Sub": "({} - {})",
    "Mul": "({} * {})",
    "Pow": "pow({}, {})",
    "Equal": "eq({}, {})",
    "Less": "lt({}, {})",
    "LessOrEqual": "le({}, {})",
    "Greater": "gt({}, {})",
    "GreaterOrEqual": "ge({}, {})",
    "And": "logical_and({}, {})",
    "Or": "logical_or({}, {})",
    "Xor": "ne(ne({}, 0.0), ne({}, 0.0))",
}


def _unary(template):
    def fn(c, node, ins, attrs):
        _elementwise(c, node, ins[:1], lambda x: template.format(x))

    return fn


def _binary(template):
    def fn(c, node, ins, attrs):
        _elementwise(c, node, ins[:2], lambda a, b: template.format(a, b))

    return fn


for _op, _t in UNARY.items():
    HANDLERS[_op] = _unary(_t)
for _op, _t in BINARY.items():
    HANDLERS[_op] = _binary(_t)


@handler("Div")
def _div(c, node, ins, attrs):
    """Integer Div truncates toward zero (ONNX's and C's), held as the f32 of an int."""
    if c.types.get(node.output[0]) in INT_TYPES:
        _elementwise(c, node, ins[:2], lambda a, b: f"float(int({a} / {b}))")
    else:
        _elementwise(c, node, ins[:2], lambda a, b: f"({a} / {b})")


@handler("IsInf")
def _is_inf(c, node, ins, attrs):
    neg, pos = attrs.get("detect_negative", 1), attrs.get("detect_positive", 1)
    tests = (["eq({0}, -inf)"] if neg else []) + (["eq({0}, inf)"] if pos else [])
    expr = " + ".join(tests) if tests else "0.0 * {0}"
    _elementwise(c, node, ins[:1], lambda x: expr.format(x))


@handler("Mod")
def _mod(c, node, ins, attrs):
    if attrs.get("fmod", 0):
        raise c.fail("Mod with fmod=1 is not supported (fmod=0, the sign of the divisor, is)")
    _elementwise(c, node, ins[:2], lambda a, b: f"mod({a}, {b})")


@handler("Trilu")
def _trilu(c, node, ins, attrs):
    k = _const_ints(c, ins[1], "Trilu's k")[0] if len(ins) > 1 and ins[1] is not None else 0
    fn = "triu" if attrs.get("upper", 1) else "tril"
    _elementwise(c, node, ins[:1], lambda x: f"{fn}({x}, k={k})")


@handler("OneHot")
def _one_hot(c, node, ins, attrs):
    idx, depth, values = ins
    depth, (off, on) = _const_ints(c, depth, "OneHot's depth")[0], [float(v) for v in values.const.reshape(-1)]
    if _norm_axis(c, attrs.get("axis", -1), idx.rank + 1) != idx.rank:
        raise c.fail("OneHot along an axis other than the last is not supported")
    out = _one_out(c, node)
    # ONNX counts a negative index from the end
    x = c.data(idx)
    i = c.temp(out + "_idx", f"int(where(lt({x}, 0.0), {x} + {fmt_num(depth)}, {x}))")
    expr = f"one_hot({i}, {depth})"
    if (off, on) != (0.0, 1.0):
        expr = f"{expr} * {fmt_num(on - off)} + {fmt_num(off)}"
    c.emit(out, expr, _out_shape(c, out, (*idx.shape, depth)))


@handler("CumSum")
def _cumsum(c, node, ins, attrs):
    """A matmul with a triangle of ones along the axis (its length known at import)."""
    x = ins[0]
    axis = _norm_axis(c, _const_ints(c, ins[1], "CumSum's axis")[0], x.rank)
    n = x.shape[axis]
    if isinstance(n, str) or n > 4096:
        raise c.fail(f"CumSum along a symbolic or longer than 4096 axis ({n}) is not supported")
    # out[j] = sum over i of x[i] * tri[i, j]: i <= j, or i < j when exclusive
    tri = np.triu(np.ones((n, n), np.float32), k=1 if attrs.get("exclusive", 0) else 0)
    if attrs.get("reverse", 0):
        tri = tri.T
    out = _one_out(c, node)
    t = c.declare_const(out + "_tri", tri, False)
    perm = [*range(axis), *range(axis + 1, x.rank), axis]  # the axis last, matmul, back
    back = [perm.index(a) for a in range(x.rank)]
    moved = c.data(x) if axis == x.rank - 1 else f"transpose({c.data(x)}, perm={fmt_list(perm)})"
    expr = f"matmul({moved}, {t})"
    if axis != x.rank - 1:
        expr = f"transpose({expr}, perm={fmt_list(back)})"
    c.emit(out, expr, _out_shape(c, out, x.shape))


@handler("LeakyRelu")
def _leaky_relu(c, node, ins, attrs):
    a = fmt_num(attrs.get("alpha", 0.01))
    _elementwise(c, node, ins[:1], lambda x: f"leaky_relu({x}, alpha={a})")


@handler("Elu")
def _elu(c, node, ins, attrs):
    a = fmt_num(attrs.get("alpha", 1.0))
    _elementwise(c, node, ins[:1], lambda x: f"elu({x}, alpha={a})")


@handler("Selu")
def _selu(c, node, ins, attrs):
    a = fmt_num(attrs.get("alpha", 1.67326319217681884765625))
    g = fmt_num(attrs.get("gamma", 1.05070102214813232421875))
    _elementwise(c, node, ins[:1], lambda x: f"({g} * elu({x}, alpha={a}))")


@handler("Gelu")
def _gelu(c, node, ins, attrs):
    mode = attrs.get("approximate", b"none")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("none", "tanh"):
        raise c.fail(f"Gelu approximate='{mode}' is not supported (none, tanh)")
    _elementwise(c, node, ins[:1], lambda x: f'gelu({x}, approximate="{mode}")')


@handler("HardSigmoid")
def _hard_sigmoid(c, node, ins, attrs):
    a, b = fmt_num(attrs.get("alpha", 0.2)), fmt_num(attrs.get("beta", 0.5))
    _elementwise(c, node, ins[:1], lambda x: f"clip({x} * {a} + {b}, 0.0, 1.0)")


@handler("HardSwish")
def _hard_swish(c, node, ins, attrs):
    _elementwise(c, node, ins[:1], lambda x: f"hard_swish({x})")


@handler("PRelu")
def _prelu(c, node, ins, attrs):
    _elementwise(c, node, ins[:2], lambda x, s: f"where(lt({x}, 0.0), {x} * {s}, {x})")


@handler("Clip")
def _clip(c, node, ins, attrs):
    lo, hi = (ins + [None, None])[1:3] if c.opset >= 11 else (None, None)
    lo_v = attrs.get("min") if c.opset < 11 else None
    hi_v = attrs.get("max") if c.opset < 11 else None
    x = ins[0]

    def expr(xs, *bounds):
        out, k = xs, 0
        if lo is not None:
            out, k = f"maximum({out}, {bounds[k]})", k + 1
        elif lo_v is not None and math.isfinite(lo_v):
            out = f"maximum({out}, {fmt_num(lo_v)})"
        if hi is not None:
            out = f"minimum({out}, {bounds[k]})"
        elif hi_v is not None and math.isfinite(hi_v):
            out = f"minimum({out}, {fmt_num(hi_v)})"
        return out

    _elementwise(c, node, [x, *(v for v in (lo, hi) if v is not None)], expr)


def _variadic(join: Callable[[list[str]], str]):
    def fn(c, node, ins, attrs):
        _elementwise(c, node, ins, lambda *xs: join(list(xs)))

    return fn


def _nest(f: str):
    def join(xs):
        out = xs[0]
        for x in xs[1:]:
            out = f"{f}({out}, {x})"
        return out

    return join


HANDLERS["Max"] = _variadic(_nest("maximum"))
HANDLERS["Min"] = _variadic(_nest("minimum"))
HANDLERS["Sum"] = _variadic(lambda xs: "(" + " + ".join(xs) + ")")
HANDLERS["Mean"] = _variadic(lambda xs: "((" + " + ".join(xs) + f") / {fmt_num(len(xs))})")


@handler("Where")
def _where(c, node, ins, attrs):
    _elementwise(c, node, ins[:3], lambda k, a, b: f"where({k}, {a}, {b})")


@handler("Identity", "Dropout")
def _identity(c, node, ins, attrs):
    if node.op_type == "Dropout":
        if len(node.output) > 1 and node.output[1] in c.used:
            raise c.fail("Dropout's mask output is not supported (inference only)")
        if len(ins) > 2 and ins[2] is not None and (ins[2].const is None or bool(ins[2].const)):
            raise c.fail("Dropout with training_mode is not supported (inference only)")
    x = ins[0]
    if x.const is not None:
        c.set_const(node.output[0], x.const, x.param)
        return
    c.emit(node.output[0], x.name, x.shape, x.nhwc).i32 = x.i32


@handler("Cast")
def _cast(c, node, ins, attrs):
    """Among float types: the identity. ONNX's integers are held in f32 or i32 (their
    values, exact below 2^24): from a float, `int` truncates toward zero as ONNX does; to
    bool, `ne(x, 0)`."""
    to, x = attrs["to"], ins[0]
    src = c.types.get(node.input[0], 1)
    out = _one_out(c, node)
    if to in FLOAT_TYPES or (to in INT_TYPES and to != 9 and src in INT_TYPES) or (to == 9 and src == 9):
        _identity(c, node, ins, attrs)
    elif to == 9:
        c.emit(out, f"ne({c.data(x)}, 0.0)", x.shape)
    elif to in INT_TYPES:
        c.emit(out, f"int({c.data(x)})", x.shape).i32 = True
    else:
        raise c.fail(f"Cast to {type_name(to)} is not supported (float, integer and bool types are)")


# -- linear algebra ------------------------------------------------------------------


@handler("MatMul")
def _matmul(c, node, ins, attrs):
    a, b = ins
    out = _one_out(c, node)
    shape = _out_shape(c, out, _matmul_shape(c, a.shape, b.shape))
    c.emit(out, f"matmul({c.data(a)}, {c.data(b)})", shape)  # any ranks, broadcast batch dims


def _matmul_shape(c, a, b) -> tuple | None:
    batch = sym.broadcast(c, a[:-2], b[:-2], strict=False) if len(a) >= 2 and len(b) >= 2 else None
    return None if batch is None else (*batch, a[-2], b[-1])


@handler("Gemm")
def _gemm(c, node, ins, attrs):
    a, b = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    xa = c.data(a)
    if attrs.get("transA", 0):
        xa = f"transpose({xa})"
    if attrs.get("transB", 0):
        if b.const is not None:  # stored as [K, N], the layout dlc's matmul reads
            xb = c.declare_const(b.onnx_name, b.const.T, b.param)
        else:
            xb = f"transpose({c.data(b)})"
    else:
        xb = c.data(b)
    expr = f"{xa} @ {xb}"
    if alpha != 1.0:
        expr = f"{fmt_num(alpha)} * ({expr})"
    if bias is not None and beta != 0.0:
        term = c.data(bias) if beta == 1.0 else f"{fmt_num(beta)} * {c.data(bias)}"
        expr = f"{expr} + {term}"
    out = _one_out(c, node)
    rows = a.shape[1] if attrs.get("transA", 0) else a.shape[0]
    cols = b.shape[0] if attrs.get("transB", 0) else b.shape[1]
    c.emit(out, expr, _out_shape(c, out, (rows, cols)))


# -- convolution and pooling ---------------------------------------------------------


def _spatial(c, node, x: Value, kernel, strides, attrs, dilations=(1, 1)):
    """(pt, pl, pb, pr) from pads / auto_pad for a 2-D window op over NCHW x."""
    if x.rank != 4 or len(kernel) != 2:
        raise c.fail(
            f"only 2-D {node.op_type} over NCHW input is supported, got input "
            f"{fmt_shape(x.shape)} and kernel {list(kernel)}"
        )
    h, w = x.shape[2:]
    if isinstance(h, str) or isinstance(w, str):
        raise c.fail("height and width must be concrete")
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for n, k, s in zip((h, w), eff, strides):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            small = total // 2
            pads.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
        return pads[0][0], pads[1][0], pads[0][1], pads[1][1]
    if auto == "VALID":
        return 0, 0, 0, 0
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4:
        raise c.fail(f"pads {pads} must have 4 values for a 2-D {node.op_type}")
    return pads[0], pads[1], pads[2], pads[3]


def _same_as_tf(n, k, s, before, total_after) -> bool:
    """Whether ONNX's windows (pad `before`, `total_after`) are TensorFlow's "same" ones."""
    out = (n + before + total_after - k) // s + 1
    tf_out = -(-n // s)
    tf_total = max((tf_out - 1) * s + k - n, 0)
    return out == tf_out and before == tf_total // 2


def _padding_mode(shape, kernel, strides, pads) -> str | None:
    pt, pl, pb, pr = pads
    if not any(pads):
        return "valid"
    h, w = shape[2:]
    if _same_as_tf(h, kernel[0], strides[0], pt, pb) and _same_as_tf(w, kernel[1], strides[1], pl, pr):
        return "same"
    return None


def _padding_arg(x_shape, kernel, strides, pads) -> str:
    """dlc's padding argument: "valid", "same" where TensorFlow's windows are ONNX's, else
    [top, bottom, left, right]."""
    mode = _padding_mode(x_shape, kernel, strides, pads)
    if mode:
        return f'"{mode}"'
    pt, pl, pb, pr = pads
    return fmt_list([pt, pb, pl, pr])


def _pair_arg(v) -> str:
    return str(v[0]) if v[0] == v[1] else fmt_list(v)


def _one_d(handler_2d):
    """A 1-D Conv, ConvTranspose or pool ([N, C, L]) as the 2-D one over [N, C, 1, L]."""

    def fn(c, node, ins, attrs):
        x = ins[0]
        if x.rank != 3:
            return handler_2d(c, node, ins, attrs)
        n, ch, length = x.shape
        x4 = Value(
            (n, ch, 1, length),
            c.temp(x.onnx_name + "_2d", f"reshape({c.data(x)}, {fmt_shape((n, ch, 1, length))})"),
            onnx_name=x.onnx_name + "_2d",
        )
        new = dict(attrs)
        for key in ("kernel_shape", "strides", "dilations"):
            if key in attrs:
                new[key] = [1, *attrs[key]]
        if "pads" in attrs:
            new["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        if "output_padding" in attrs:
            new["output_padding"] = [0, *attrs["output_padding"]]
        rest = list(ins[1:])
        if node.op_type in ("Conv", "ConvTranspose"):
            w = ins[1]
            if w.const is not None:
                rest[0] = Value(
                    (*w.shape[:2], 1, w.shape[2]), const=w.const[:, :, None, :], param=w.param, onnx_name=w.onnx_name
                )
            else:
                shape4 = (*w.shape[:2], 1, w.shape[2])
                rest[0] = Value(
                    shape4,
                    c.temp(w.onnx_name + "_2d", f"reshape({c.data(w)}, {fmt_shape(shape4)})"),
                    onnx_name=w.onnx_name + "_2d",
                )
            if "kernel_shape" not in new:
                new["kernel_shape"] = [1, w.shape[2]]
        out = _one_out(c, node)
        shape = _out_shape(c, out)
        mid = out + "_2d"
        c.shapes[mid] = (shape[0], shape[1], 1, shape[2])
        node_2d = helper.make_node(node.op_type, [i for i in node.input], [mid], name=node.name)
        handler_2d(c, node_2d, [x4, *rest], new)
        c.emit(out, f"reshape({c.data(c.values[mid])}, {fmt_shape(shape)})", shape)

    return fn


def _conv(c, node, ins, attrs):
    x, w = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    out = _one_out(c, node)
    kernel = list(attrs.get("kernel_shape", w.shape[2:]))
    strides = list(attrs.get("strides", [1] * len(kernel)))
    dil = list(attrs.get("dilations", [1] * len(kernel)))
    groups = attrs.get("group", 1)
    pads = _spatial(c, node, x, kernel, strides, attrs, dil)
    bn = c.bn_after.get(out)
    folded = (
        _fold_bn(c, w.const, bias.const if bias is not None else None, bn)
        if bn is not None and w.const is not None and (bias is None or bias.const is not None)
        else None
    )
    if folded is not None:  # Conv + BatchNormalization -> one Conv
        c.skip.add(id(bn))
        out = bn.output[0]
        w = Value(w.shape, const=folded[0], param=True, onnx_name=w.onnx_name + "_bn")
        bias = Value(folded[1].shape, const=folded[1], param=True, onnx_name=out + "_bias")
    # [Cout, Cin/G, kh, kw] -> dlc's [kh, kw, Cin/G, Cout]
    wn = (
        c.declare_const(w.onnx_name, w.const.transpose(2, 3, 1, 0), w.param)
        if w.const is not None
        else f"transpose({c.data(w)}, perm=[2, 3, 1, 0])"
    )
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    args = [c.nhwc(x), wn, f"stride={_pair_arg(strides)}", f"padding={_padding_arg(x.shape, eff, strides, pads)}"]
    if dil != [1, 1]:
        args.append(f"dilation={_pair_arg(dil)}")
    if groups != 1:
        args.append(f"groups={groups}")
    expr = f"conv2d({', '.join(args)})"
    if bias is not None:
        expr = f"{expr} + {c.data(bias)}"  # [Cout] broadcasts along NHWC's last axis
    c.emit(out, expr, _out_shape(c, out), nhwc=True)


def _pool_geometry(c, node, x, attrs):
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * len(kernel)))
    if list(attrs.get("dilations", [1] * len(kernel))) != [1] * len(kernel):
        raise c.fail("pool dilations other than 1 are not supported")
    pads = _spatial(c, node, x, kernel, strides, attrs)
    extra = [0, 0]
    if attrs.get("ceil_mode", 0):
        for k, (n, kk, s, lo, hi) in enumerate(zip(x.shape[2:], kernel, strides, pads[:2], pads[2:])):
            out = -(-(n + lo + hi - kk) // s) + 1
            if (out - 1) * s >= n + lo:  # the last window must start inside the input or its pad
                out -= 1
            extra[k] = max((out - 1) * s + kk - (n + lo + hi), 0)
    return kernel, strides, pads, extra


def _pool(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    kernel, strides, pads, extra = _pool_geometry(c, node, x, attrs)
    fn = "max_pool" if node.op_type == "MaxPool" else "avg_pool"
    include = node.op_type == "AveragePool" and attrs.get("count_include_pad", 0) and any(pads)
    xs = c.nhwc(x)
    if include:
        # ONNX counts the pads but not ceil_mode's extra: the pads become zeros of the input,
        # the extra stays padding that the average leaves out.
        pt, pl, pb, pr = pads
        xs = c.temp(out + "_pad", f"pad({xs}, [0, {pt}, {pl}, 0], [0, {pb}, {pr}, 0])")
        pads = (0, 0, 0, 0)
        shape = (x.shape[0], x.shape[1], x.shape[2] + pt + pb, x.shape[3] + pl + pr)
    else:
        shape = x.shape
    all_pads = (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])
    padding = _padding_arg(shape, kernel, strides, all_pads)
    c.emit(
        out,
        f"{fn}({xs}, {_pair_arg(kernel)}, stride={_pair_arg(strides)}, padding={padding})",
        _out_shape(c, out),
        nhwc=True,
    )


def _conv_transpose(c, node, ins, attrs):
    """ConvTranspose as a conv2d: the input with stride - 1 zeros between its elements,
    padded by (dilated kernel - 1 - pads), convolved at stride 1 with the filter flipped."""
    x, w = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    out = _one_out(c, node)
    if x.rank != 4 or w.rank != 4:
        raise c.fail(f"only 1-D and 2-D ConvTranspose are supported, got input {fmt_shape(x.shape)}")
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto not in ("NOTSET", "VALID") or "output_shape" in attrs:
        raise c.fail(
            "ConvTranspose with auto_pad SAME_* or output_shape is not supported (pads and output_padding are)"
        )
    kernel = list(w.shape[2:])
    strides = list(attrs.get("strides", [1, 1]))
    dil = list(attrs.get("dilations", [1, 1]))
    extra = list(attrs.get("output_padding", [0, 0]))
    pads = [0, 0, 0, 0] if auto == "VALID" else list(attrs.get("pads", [0, 0, 0, 0]))
    groups = attrs.get("group", 1)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    conv_pads = [
        eff[0] - 1 - pads[0],
        eff[0] - 1 - pads[2] + extra[0],
        eff[1] - 1 - pads[1],
        eff[1] - 1 - pads[3] + extra[1],
    ]
    if min(conv_pads) < 0:
        raise c.fail(f"ConvTranspose pads {pads} larger than the dilated kernel - 1 are not supported")
    n, ch, h, wd = x.shape
    sh, sw = strides
    xs = c.nhwc(x)
    if (sh, sw) != (1, 1):
        six = c.temp(
            out + "_up",
            f"pad(reshape({xs}, {fmt_shape((n, h, 1, wd, 1, ch))}), "
            f"[0, 0, 0, 0, 0, 0], [0, 0, {sh - 1}, 0, {sw - 1}, 0])",
        )
        flat = f"reshape({six}, {fmt_shape((n, h * sh, wd * sw, ch))})"
        xs = c.temp(out + "_zeros", f"slice({flat}, [0, 0, 0, 0], [-1, {(h - 1) * sh + 1}, {(wd - 1) * sw + 1}, -1])")
    # [Cin, Cout/G, kh, kw] -> per group [kh, kw, Cin/G, Cout/G], flipped; groups side by side
    cin_g = w.shape[0] // groups
    if w.const is not None:
        wk = w.const[:, :, ::-1, ::-1]
        wk = np.concatenate([wk[g * cin_g : (g + 1) * cin_g].transpose(2, 3, 0, 1) for g in range(groups)], axis=3)
        wn = c.declare_const(w.onnx_name, np.ascontiguousarray(wk), w.param)
    else:
        wn = c.temp(w.onnx_name + "_t", f"transpose({c.data(w)}, perm=[2, 3, 0, 1])")
        shape = [kernel[0], kernel[1], w.shape[0], w.shape[1]]
        for axis in (0, 1):
            wn = (
                _take_along(c, w.onnx_name + "_flip", wn, shape, axis, list(range(kernel[axis] - 1, -1, -1)), -1)
                if kernel[axis] > 1
                else wn
            )
        if groups != 1:
            parts = ", ".join(f"slice({wn}, [0, 0, {g * cin_g}, 0], [-1, -1, {cin_g}, -1])" for g in range(groups))
            wn = c.temp(w.onnx_name + "_groups", f"concat([{parts}], axis=3)")
    args = [xs, wn, "stride=1", f"padding={fmt_list(conv_pads)}"]
    if dil != [1, 1]:
        args.append(f"dilation={_pair_arg(dil)}")
    if groups != 1:
        args.append(f"groups={groups}")
    expr = f"conv2d({', '.join(args)})"
    if bias is not None:
        expr = f"{expr} + {c.data(bias)}"
    c.emit(out, expr, _out_shape(c, out), nhwc=True)


HANDLERS["ConvTranspose"] = _one_d(_conv_transpose)
HANDLERS["Conv"] = _one_d(_conv)
HANDLERS["MaxPool"] = HANDLERS["AveragePool"] = _one_d(_pool)


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    fn = "mean" if node.op_type == "GlobalAveragePool" else "max"
    if x.rank == 4:
        c.emit(out, f"{fn}({c.nhwc(x)}, axis=[1, 2], keepdims=true)", _out_shape(c, out), nhwc=True)
    else:
        axes = list(range(2, x.rank))
        c.emit(out, f"{fn}({c.data(x)}, axis={fmt_list(axes)}, keepdims=true)", _out_shape(c, out))


@handler("BatchNormalization")
def _batch_norm(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    if attrs.get("training_mode", 0):
        raise c.fail("BatchNormalization with training_mode=1 is not supported (inference only)")
    if any(v.const is None for v in ins[1:5]):
        raise c.fail("BatchNormalization's scale, bias, mean and var must be constants")
    if ins[1].param or ins[2].param:  # written out, so that they train under their names (PyTorch's)
        return _batch_norm_trainable(c, out, ins, attrs)
    scale, shift, mean, var = (v.const.astype(np.float64) for v in ins[1:5])
    k = scale / np.sqrt(var + attrs.get("epsilon", 1e-5))
    bshape = (-1,) + (1,) * (x.rank - 2)
    ks = Value(
        tuple(k.reshape(bshape).shape),
        const=k.reshape(bshape).astype(np.float32),
        param=ins[1].param,
        onnx_name=out + "_scale",
    )
    ts = Value(
        ks.shape,
        const=(shift - mean * k).reshape(bshape).astype(np.float32),
        param=ins[2].param,
        onnx_name=out + "_shift",
    )
    nhwc = x.nhwc and x.rank == 4
    c.emit(out, f"{c.operand(x, nhwc)} * {c.operand(ks, nhwc)} + {c.operand(ts, nhwc)}", _out_shape(c, out), nhwc)


def _batch_norm_trainable(c, out, ins, attrs):
    """`(x - mean) * inv_std * scale + shift` over the constant statistics, each [C] as
    saved (`bn.weight`, `bn.running_mean`), broadcast along the channel axis."""
    x, scale, shift, mean, var = ins[:5]
    nhwc = x.nhwc and x.rank == 4
    inv = 1.0 / np.sqrt(var.const.astype(np.float64) + attrs.get("epsilon", 1e-5))
    inv = Value(inv.shape, const=inv.astype(np.float32), onnx_name=out + "_inv_std")

    def channel(v):  # NHWC's channels are last, where [C] broadcasts; ONNX's are axis 1
        return c.data(v) if nhwc else f"reshape({c.data(v)}, {fmt_shape(v.shape + (1,) * (x.rank - 2))})"

    expr = f"({c.operand(x, nhwc)} - {channel(mean)}) * {channel(inv)} * {channel(scale)} + {channel(shift)}"
    c.emit(out, expr, _out_shape(c, out), nhwc)


@handler("LRN")
def _lrn(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    size = attrs["size"]
    alpha, beta, bias = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    if x.rank != 4:
        raise c.fail("LRN over a rank other than 4 is not supported")
    ch = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    xs = c.nhwc(x)
    sq = c.temp(out + "_sq", f"pad(square({xs}), [0, 0, 0, {lo}], [0, 0, 0, {hi}])")
    window = " + ".join(f"slice({sq}, [0, 0, 0, {k}], [-1, -1, -1, {ch}])" for k in range(size))
    s = c.temp(out + "_sum", window)
    c.emit(
        out,
        f"{xs} / pow({fmt_num(bias)} + {fmt_num(alpha / size)} * {s}, {fmt_num(beta)})",
        _out_shape(c, out),
        nhwc=True,
    )


# -- softmax ------------------------------------------------------------------------


@handler("Softmax", "LogSoftmax")
def _softmax(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    fn = "softmax" if node.op_type == "Softmax" else "log_softmax"
    shape = _out_shape(c, out, x.shape)
    if c.opset >= 13:
        axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
        if x.nhwc:
            c.emit(out, f"{fn}({x.name}, axis={_nhwc_axis(axis)})", shape, nhwc=True)
        else:
            c.emit(out, f"{fn}({c.data(x)}, axis={axis})", shape)
        return
    # Before opset 13 the input is seen as 2-D: [prod(dims before axis), prod(the rest)].
    axis = _norm_axis(c, attrs.get("axis", 1), x.rank)
    if axis == x.rank - 1:
        c.emit(out, f"{fn}({c.data(x)}, axis=-1)", shape)
        return
    rest = x.shape[axis:]
    if any(isinstance(d, str) for d in rest):
        raise c.fail(f"{node.op_type} over symbolic dims {fmt_shape(rest)} is not supported")
    flat = c.temp(out + "_2d", f"reshape({c.data(x)}, [-1, {math.prod(rest)}])")
    c.emit(out, f"reshape({fn}({flat}, axis=-1), {fmt_shape(shape)})", shape)


# -- shape ops ----------------------------------------------------------------------


def _reshape_to(c, node, x: Value, target=None) -> None:
    out = _one_out(c, node)
    shape = _out_shape(c, out, target)
    if tuple(shape) == tuple(x.shape):
        c.emit(out, c.data(x), shape)
    else:
        c.emit(out, f"reshape({c.data(x)}, {fmt_shape(shape)})", shape)


@handler("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(c, node, ins, attrs):
    x = ins[0]
    target = None
    if node.op_type == "Reshape" and ins[1].const is not None:  # 0 and -1 resolved here, symbolic dims too
        target = sym.reshape_target(c, x.shape, ins[1].const, bool(attrs.get("allowzero", 0)))
    elif node.op_type in ("Squeeze", "Unsqueeze"):
        axes = _const_ints(c, ins[1], f"{node.op_type}'s axes") if len(ins) > 1 and ins[1] is not None else None
        axes = attrs.get("axes", axes)
        if node.op_type == "Unsqueeze":
            target = list(x.shape)
            for a in sorted(_norm_axis(c, a, x.rank + len(axes)) for a in axes):
                target.insert(a, 1)
        else:
            drop = {_norm_axis(c, a, x.rank) for a in axes} if axes else {k for k, d in enumerate(x.shape) if d == 1}
            target = [d for k, d in enumerate(x.shape) if k not in drop]
    elif node.op_type == "Flatten":
        axis = attrs.get("axis", 1)
        axis = axis + x.rank if axis < 0 else axis
        target = [sym.dl_dim(sym.product(sym.Dim.parse(d) for d in part)) for part in (x.shape[:axis], x.shape[axis:])]
    _reshape_to(c, node, x, None if target is None else tuple(target))


@handler("ConstantOfShape")
def _constant_of_shape(c, node, ins, attrs):
    """A shape holding symbolic dims (else folded): `full`."""
    shape = sym.dl_shape(ins[0].const)
    value = attrs.get("value")
    v = 0.0 if value is None else float(np.asarray(_tensor(value)).reshape(-1)[0])
    out = _one_out(c, node)
    c.emit(out, f"full({fmt_shape(shape)}, {fmt_num(v)})", _out_shape(c, out, shape))


def _tensor(t):
    return numpy_helper.to_array(t)


@handler("Range")
def _range(c, node, ins, attrs):
    """Range with a symbolic limit (else folded): `start + arange(n) * delta`."""
    if any(v.const is None for v in ins):
        raise c.fail("Range's start, limit and delta must be known at import (the limit may be a symbolic dim)")
    start, limit, delta = (v.const for v in ins)
    if sym.is_symbolic(start) or sym.is_symbolic(delta):
        raise c.fail("Range with a symbolic start or delta is not supported")
    start, delta = int(start), int(delta)
    n = sym.div(sym.arith(c, "Sub", limit, start).item(), delta) if delta > 0 else None
    if n is None:
        raise c.fail(f"Range({start}, {sym.dl_shape(limit)}, {delta}) is not a whole number of steps")
    n = sym.dl_dim(n)
    expr = f"arange({n})"
    if delta != 1:
        expr = f"{expr} * {fmt_num(delta)}"
    if start:
        expr = f"{expr} + {fmt_num(start)}"
    out = _one_out(c, node)
    c.emit(out, expr, _out_shape(c, out, (n,)))


@handler("Transpose")
def _transpose(c, node, ins, attrs):
    x = ins[0]
    perm = list(attrs.get("perm", reversed(range(x.rank))))
    out = _one_out(c, node)
    if x.nhwc:  # read the NHWC tensor directly: logical axis a is its axis TO_NHWC.index(a)
        perm = [TO_NHWC.index(p) for p in perm]
        c.emit(out, f"transpose({x.name}, perm={fmt_list(perm)})", _out_shape(c, out))
        return
    shape = tuple(x.shape[p] for p in perm)
    c.emit(out, f"transpose({c.data(x)}, perm={fmt_list(perm)})", _out_shape(c, out, shape))


@handler("Concat")
def _concat(c, node, ins, attrs):
    out = _one_out(c, node)
    axis = _norm_axis(c, attrs["axis"], ins[0].rank)
    along = [v.shape[axis] for v in ins]
    known = None
    if all(isinstance(d, int) for d in along):
        known = (*ins[0].shape[:axis], sum(along), *ins[0].shape[axis + 1 :])
    shape = _out_shape(c, out, known)
    if len(shape) == 4 and any(v.nhwc for v in ins):
        parts = [c.nhwc(v) for v in ins]
        c.emit(out, f"concat([{', '.join(parts)}], axis={_nhwc_axis(axis)})", shape, nhwc=True)
        return
    c.emit(out, f"concat([{', '.join(c.data(v) for v in ins)}], axis={axis})", shape)


@handler("Expand")
def _expand(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    target = None
    if ins[1].const is not None:
        target = sym.broadcast(c, x.shape, sym.dl_shape(ins[1].const))
    shape = _out_shape(c, out, target)
    if tuple(shape) == tuple(x.shape):
        c.emit(out, c.data(x), shape)
    else:
        c.emit(out, f"broadcast_to({c.data(x)}, {fmt_shape(shape)})", shape)


@handler("Tile")
def _tile(c, node, ins, attrs):
    x = ins[0]
    reps = _const_ints(c, ins[1], "Tile's repeats")
    out = _one_out(c, node)
    cur = c.data(x)
    for axis, r in enumerate(reps):
        if r < 1:
            raise c.fail(f"Tile repeats must be >= 1, got {reps}")
        if r > 1:
            if isinstance(x.shape[axis], str):
                raise c.fail(f"Tile along symbolic dim {x.shape[axis]} is not supported")
            cur = c.temp(f"{out}_t{axis}", f"concat([{', '.join([cur] * r)}], axis={axis})")
    c.emit(out, cur, _out_shape(c, out))


@handler("Pad")
def _pad(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise c.fail(f"Pad mode '{mode}' is not supported (constant, reflect, edge, wrap)")
    pads = _const_ints(c, ins[1], "Pad's pads") if c.opset >= 11 else list(attrs["pads"])
    value = 0.0
    if c.opset >= 11 and len(ins) > 2 and ins[2] is not None:
        if ins[2].const is None:
            raise c.fail("Pad's constant_value must be a constant")
        value = float(np.asarray(ins[2].const).reshape(-1)[0]) if ins[2].const.size else 0.0
    elif c.opset < 11:
        value = attrs.get("value", 0.0)
    if not math.isfinite(value):
        raise c.fail(f"Pad with constant_value {value} is not supported (finite values are)")
    axes = list(range(x.rank))
    if len(ins) > 3 and ins[3] is not None:
        axes = [_norm_axis(c, a, x.rank) for a in _const_ints(c, ins[3], "Pad's axes")]
    before, after = [0] * x.rank, [0] * x.rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if min(before + after) < 0:
        raise c.fail(f"negative pads {pads} are not supported")
    for a in range(x.rank):
        if (before[a] or after[a]) and isinstance(x.shape[a], str):
            raise c.fail(f"Pad along symbolic dim {x.shape[a]} is not supported")
    shape = _out_shape(c, out)
    if mode == "constant":
        expr = f"pad({c.data(x)}, {fmt_list(before)}, {fmt_list(after)})"
        if value != 0.0:  # value where the padding is: value * (1 - the padded ones)
            ones = [d if (before[k] or after[k]) else 1 for k, d in enumerate(x.shape)]
            m = c.names.new(out + "_ones")
            c.decls.append(f"const {m}: {fmt_shape(ones)} = 1")
            expr = f"{expr} + {fmt_num(value)} * (1.0 - pad({m}, {fmt_list(before)}, {fmt_list(after)}))"
        c.emit(out, expr, shape)
        return
    cur, cur_shape = c.data(x), list(x.shape)
    for a in range(x.rank):
        if not (before[a] or after[a]):
            continue
        d = cur_shape[a]
        if mode == "reflect" and (before[a] >= d or after[a] >= d):
            raise c.fail(f"reflect pads {before[a]}, {after[a]} must be smaller than dim {d}")
        inner = list(range(d))
        if mode == "edge":
            idx = [0] * before[a] + inner + [d - 1] * after[a]
        elif mode == "reflect":
            idx = list(range(before[a], 0, -1)) + inner + list(range(d - 2, d - 2 - after[a], -1))
        else:  # wrap
            idx = [i % d for i in range(-before[a], d + after[a])]
        cur = _gather_runs(c, out, cur, cur_shape, a, idx)
        cur_shape[a] = len(idx)
    c.emit(out, cur, shape)


def _gather_runs(c, out: str, x: str, shape: list, axis: int, idx: list[int]) -> str:
    """x's elements idx along axis: one slice per run of consecutive indices, concatenated."""
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    if len(runs) > 256:
        raise c.fail(f"gathering {len(idx)} scattered elements along axis {axis} is not supported")
    rank = len(shape)
    parts = []
    for r in runs:
        begin, size = [0] * rank, [-1] * rank
        begin[axis], size[axis] = r[0], len(r)
        parts.append(x if len(r) == shape[axis] else f"slice({x}, {fmt_list(begin)}, {fmt_list(size)})")
    return c.temp(f"{out}_g{axis}", parts[0] if len(parts) == 1 else f"concat([{', '.join(parts)}], axis={axis})")


def _slice_expr(c, x: Value, begin, size) -> str:
    if all(b == 0 for b in begin) and all(s == -1 or s == d for s, d in zip(size, x.shape)):
        return c.data(x)
    return f"slice({c.data(x)}, {fmt_list(begin)}, {fmt_list(size)})"


def _slice_ends(c, x: Value, ends: Value, axes: Value | None) -> list[int]:
    """Slice's ends; an end that is the symbolic dim of its axis (`x[:, :x.size(1)]`) is
    the whole axis."""
    if ends.const is None or not sym.is_symbolic(ends.const):
        return _const_ints(c, ends, "Slice's ends")
    flat = ends.const.reshape(-1)
    axes_ = _const_ints(c, axes, "Slice's axes") if axes is not None else list(range(len(flat)))
    out = []
    for e, a in zip(flat, axes_):
        e = sym.norm(e)
        if isinstance(e, sym.Dim):
            if not sym.same(e, sym.Dim.parse(x.shape[_norm_axis(c, a, x.rank)])):
                raise c.fail(f"Slice's end {e} on axis {a} of {fmt_shape(x.shape)} is not known at import")
            e = 2**63 - 1
        out.append(int(e))
    return out


@handler("Slice")
def _slice(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    if c.opset >= 10:
        starts = _const_ints(c, ins[1], "Slice's starts")
        ends = _slice_ends(c, x, ins[2], ins[3] if len(ins) > 3 else None)
        axes = (
            _const_ints(c, ins[3], "Slice's axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        )
        steps = _const_ints(c, ins[4], "Slice's steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    else:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    cur, shape = c.data(x), list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _norm_axis(c, a, x.rank)
        d = shape[a]
        if st == 0:
            raise c.fail(f"Slice step 0 on axis {a}")
        if isinstance(d, str):
            if s == 0 and e >= 2**31 - 1 and st == 1:
                continue
            raise c.fail(f"Slice along symbolic dim {d} must take all of it")
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        s, e = (max(0, min(d, s)), max(0, min(d, e))) if st > 0 else (max(-1, min(d - 1, s)), max(-1, min(d - 1, e)))
        idx = list(range(s, e, st))
        if not idx:
            raise c.fail(f"Slice gives an empty tensor on axis {a}: dlc tensors are never empty")
        cur = _take_along(c, out, cur, shape, a, idx, st)
        shape[a] = len(idx)
    c.emit(out, cur, _out_shape(c, out, tuple(shape)))


def _take_along(c, out: str, x: str, shape: list, axis: int, idx: list[int], step: int) -> str:
    """Elements idx (an arithmetic run with this step) of x along axis, as a .dl name."""
    rank = len(shape)

    def sl(t, start, n, dims):
        begin, size = [0] * rank, [-1] * rank
        begin[axis], size[axis] = start, n
        if start == 0 and n == dims[axis]:
            return t
        return f"slice({t}, {fmt_list(begin)}, {fmt_list(size)})"

    if step == 1:
        return c.temp(f"{out}_s{axis}", sl(x, idx[0], len(idx), shape)) if len(idx) != shape[axis] else x
    if step < 0:  # reversed: one slice per element
        if len(idx) > 256:
            raise c.fail(f"Slice with a negative step over {len(idx)} elements is not supported")
        parts = ", ".join(sl(x, i, 1, shape) for i in idx)
        return c.temp(f"{out}_s{axis}", f"concat([{parts}], axis={axis})" if len(idx) > 1 else parts)
    # A step > 1: take the run, pad it to count * step, split the axis into [count, step],
    # keep column 0 and merge back.
    n, count = idx[-1] + 1 - idx[0], len(idx)
    run = sl(x, idx[0], n, shape)
    before, after = [0] * rank, [0] * rank
    after[axis] = count * step - n
    padded = f"pad({run}, {fmt_list(before)}, {fmt_list(after)})" if after[axis] else run
    split = [*shape[:axis], count, step, *shape[axis + 1 :]]
    t = c.temp(f"{out}_split{axis}", f"reshape({padded}, {fmt_shape(split)})")
    begin, size = [0] * (rank + 1), [-1] * (rank + 1)
    size[axis + 1] = 1
    kept = [*shape[:axis], count, *shape[axis + 1 :]]
    return c.temp(f"{out}_s{axis}", f"reshape(slice({t}, {fmt_list(begin)}, {fmt_list(size)}), {fmt_shape(kept)})")


@handler("Split")
def _split(c, node, ins, attrs):
    x = ins[0]
    axis = _norm_axis(c, attrs.get("axis", 0), x.rank)
    outs = [o for o in node.output]
    d = x.shape[axis]
    if isinstance(d, str):
        raise c.fail(f"Split along symbolic dim {d} is not supported")
    if len(ins) > 1 and ins[1] is not None:
        sizes = _const_ints(c, ins[1], "Split's sizes")
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        n = len(outs)
        step = -(-d // n)
        sizes = [min(step, d - k * step) for k in range(n)]
    offset = 0
    for o, n in zip(outs, sizes):
        begin = [0] * x.rank
        size = [-1] * x.rank
        begin[axis], size[axis] = offset, n
        offset += n
        if o:
            c.emit(o, _slice_expr(c, x, begin, size), _out_shape(c, o))


@handler("Gather")
def _gather(c, node, ins, attrs):
    x, idx = ins
    out = _one_out(c, node)
    axis = _norm_axis(c, attrs.get("axis", 0), x.rank)
    if idx.const is None:  # run-time indices: dlc's gather, a negative index counted from the end
        shape = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :])
        d = x.shape[axis]
        if isinstance(d, int):
            f = c.data(idx)
            i = c.temp(out + "_idx", f"int(where(lt({f}, 0.0), {f} + {fmt_num(d)}, {f}))")
        else:
            i = c.index(idx)
        c.emit(out, f"gather({c.data(x)}, {i}, axis={axis})", _out_shape(c, out, shape))
        return
    d = x.shape[axis]
    if isinstance(d, str):
        raise c.fail(f"Gather along symbolic dim {d} is not supported")
    flat = [int(i) + d if int(i) < 0 else int(i) for i in idx.const.reshape(-1)]
    if any(not 0 <= i < d for i in flat):
        raise c.fail(f"Gather index out of range for axis {axis} of size {d}")
    parts = []
    for i in flat:
        begin, size = [0] * x.rank, [-1] * x.rank
        begin[axis], size[axis] = i, 1
        parts.append(_slice_expr(c, x, begin, size))
    expr = parts[0] if len(parts) == 1 else f"concat([{', '.join(parts)}], axis={axis})"
    shape = _out_shape(c, out, (*x.shape[:axis], *idx.const.shape, *x.shape[axis + 1 :]))
    c.emit(out, f"reshape({expr}, {fmt_shape(shape)})", shape)


@handler("GatherND")
def _gather_nd(c, node, ins, attrs):
    """data[i_0, ..., i_{k-1}] for each index tuple (indices' last axis, k long): the
    tuple as one flat index into data's first k dims (their strides known at import), then
    `gather` along the merged axis. A negative index counts from the end of its dim."""
    x, idx = ins
    if attrs.get("batch_dims", 0):
        raise c.fail("GatherND with batch_dims is not supported")
    k = idx.shape[-1]
    if not isinstance(k, int) or k > x.rank:
        raise c.fail(f"GatherND's index tuples must have a known length of at most {x.rank}, got {k}")
    lead, rest = x.shape[:k], x.shape[k:]
    if any(isinstance(d, str) for d in lead[1:]):
        raise c.fail(f"GatherND over the symbolic dims {fmt_shape(lead)} is not supported (only the first)")
    out = _one_out(c, node)
    i = c.data(idx)
    terms = []
    for j, d in enumerate(lead):
        begin, size = [0] * idx.rank, [-1] * idx.rank
        begin[-1], size[-1] = j, 1
        col = c.temp(
            f"{out}_i{j}", f"reshape(slice({i}, {fmt_list(begin)}, {fmt_list(size)}), {fmt_shape(idx.shape[:-1])})"
        )
        if isinstance(d, int):
            col = f"where(lt({col}, 0.0), {col} + {fmt_num(d)}, {col})"
        stride = math.prod(lead[j + 1 :])
        terms.append(col if stride == 1 else f"{col} * {fmt_num(stride)}")
    flat = c.temp(f"{out}_flat", f"int({' + '.join(terms)})")
    merged = sym.dl_dim(sym.product(sym.Dim.parse(d) for d in lead))
    table = c.data(x) if k == 1 else f"reshape({c.data(x)}, {fmt_shape((merged, *rest))})"
    shape = (*idx.shape[:-1], *rest)
    c.emit(out, f"gather({table}, {flat}, axis=0)", _out_shape(c, out, shape))


@handler("GatherElements")
def _gather_elements(c, node, ins, attrs):
    """NumPy's take_along_axis: each output element's flat index into x (its own coords,
    the index's value on the axis; x's strides known at import), then `gather` from the
    flattened x. A negative index counts from the end of the axis."""
    x, idx = ins
    axis = _norm_axis(c, attrs.get("axis", 0), x.rank)
    if any(isinstance(d, str) for d in x.shape[1:]):
        raise c.fail(f"GatherElements over the symbolic dims {fmt_shape(x.shape)} is not supported (only the first)")
    out = _one_out(c, node)
    shape = tuple(idx.shape)
    i = c.data(idx)
    if isinstance(x.shape[axis], int):
        i = f"where(lt({i}, 0.0), {i} + {fmt_num(x.shape[axis])}, {i})"
    terms = []
    for k in range(x.rank):
        stride = math.prod(x.shape[k + 1 :])
        if k == axis:
            coord = i
        else:
            if isinstance(shape[k], str) and k:
                raise c.fail(f"GatherElements with the symbolic index dim {shape[k]} is not supported")
            ones = [1] * x.rank
            ones[k] = shape[k]
            coord = f"reshape(arange({shape[k]}), {fmt_shape(ones)})"
        terms.append(coord if stride == 1 else f"{coord} * {fmt_num(stride)}")
    flat = c.temp(f"{out}_flat", f"int(broadcast_to({' + '.join(terms)}, {fmt_shape(shape)}))")
    c.emit(out, f"gather(reshape({c.data(x)}, [-1]), {flat})", _out_shape(c, out, shape))


@handler("ScatterND")
def _scatter_nd(c, node, ins, attrs):
    """data with its slices at the index tuples replaced (reduction "add": increased) by
    updates: the tuples as flat indices into data's first k dims (known at import), their
    one-hot rows moving the updates there with a matmul, and a mask of the rows hit."""
    x, idx, upd = ins
    reduction = attrs.get("reduction", "none")
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in ("none", "add"):
        raise c.fail(f"ScatterND with reduction '{reduction}' is not supported (none and add are)")
    k = idx.shape[-1]
    lead, rest = x.shape[:k], x.shape[k:]
    if not isinstance(k, int) or any(isinstance(d, str) for d in (*lead, *rest, *idx.shape)):
        raise c.fail(f"ScatterND into {fmt_shape(x.shape)} at {fmt_shape(idx.shape)} needs dims known at import")
    out = _one_out(c, node)
    i, rows, size = c.data(idx), math.prod(idx.shape[:-1]), math.prod(rest)
    terms = []
    for j, d in enumerate(lead):
        begin, width = [0] * idx.rank, [-1] * idx.rank
        begin[-1], width[-1] = j, 1
        col = f"reshape(slice({i}, {fmt_list(begin)}, {fmt_list(width)}), [{rows}])"
        col = c.temp(f"{out}_i{j}", f"where(lt({col}, 0.0), {col} + {fmt_num(d)}, {col})")
        stride = math.prod(lead[j + 1 :])
        terms.append(col if stride == 1 else f"{col} * {fmt_num(stride)}")
    n = math.prod(lead)
    hot = c.temp(f"{out}_hot", f"transpose(one_hot(int({' + '.join(terms)}), {n}))")  # [n, rows]
    moved = f"matmul({hot}, reshape({c.data(upd)}, [{rows}, {size}]))"
    moved = c.temp(f"{out}_moved", f"reshape({moved}, {fmt_shape(x.shape)})")
    if reduction == "add":
        c.emit(out, f"{c.data(x)} + {moved}", _out_shape(c, out, x.shape))
        return
    hit = f"reshape(sum({hot}, axis=-1), {fmt_shape([*lead, *([1] * len(rest))])})"
    c.emit(out, f"where(gt({hit}, 0.0), {moved}, {c.data(x)})", _out_shape(c, out, x.shape))


@handler("TopK")
def _top_k(c, node, ins, attrs):
    """k rounds of argmax (argmin when largest=0), each taking the first extremum (ONNX's
    tie rule: the lower index) and hiding it from the next; sorted either way."""
    x = ins[0]
    k = _const_ints(c, ins[1], "TopK's k")[0]
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    n = x.shape[axis]
    if isinstance(n, str) or not 1 <= k <= min(n, 64):
        raise c.fail(f"TopK with k={k} over an axis of {n} is not supported (k from 1 to 64, the axis known)")
    base = node.output[0] or node.output[1]
    perm = [*range(axis), *range(axis + 1, x.rank), axis]  # the axis last
    back = [perm.index(a) for a in range(x.rank)]
    last = c.data(x) if axis == x.rank - 1 else c.temp(base + "_last", f"transpose({c.data(x)}, perm={fmt_list(perm)})")
    moved = [x.shape[p] for p in perm]
    ones = [1] * (x.rank - 1)
    pos = c.temp(base + "_pos", f"reshape(arange({n}), {fmt_shape([*ones, n])})")
    fn, hide = ("argmax", "-inf") if attrs.get("largest", 1) else ("argmin", "inf")
    cur, vals, idxs = last, [], []
    for j in range(k):
        i = c.temp(f"{base}_i{j}", f"reshape({fn}({cur}, axis=-1), {fmt_shape([*moved[:-1], 1])})")
        hit = c.temp(f"{base}_hit{j}", f"eq({pos}, {i})")
        vals.append(f"sum(where({hit}, {last}, 0.0), axis=-1, keepdims=true)")
        idxs.append(i)
        if j + 1 < k:
            cur = c.temp(f"{base}_rest{j}", f"where({hit}, {hide}, {cur})")
    shape = tuple([*moved[:-1], k][p] for p in back)
    for o, parts in zip(node.output, (vals, idxs)):
        if o:
            expr = parts[0] if k == 1 else f"concat([{', '.join(parts)}], axis=-1)"
            if axis != x.rank - 1:
                expr = f"transpose({expr}, perm={fmt_list(back)})"
            c.emit(o, expr, _out_shape(c, o, shape))


# -- reductions ---------------------------------------------------------------------

REDUCE = {
    "ReduceSum": "sum({x}, axis={a}, keepdims={k})",
    "ReduceMean": "mean({x}, axis={a}, keepdims={k})",
    "ReduceMax": "max({x}, axis={a}, keepdims={k})",
    "ReduceMin": "min({x}, axis={a}, keepdims={k})",
    "ReduceL1": "sum(abs({x}), axis={a}, keepdims={k})",
    "ReduceL2": "sqrt(sum(square({x}), axis={a}, keepdims={k}))",
    "ReduceSumSquare": "sum(square({x}), axis={a}, keepdims={k})",
    "ReduceLogSum": "log(sum({x}, axis={a}, keepdims={k}))",
    "ReduceLogSumExp": "logsumexp({x}, axis={a}, keepdims={k})",
}
# opset from which each reduction takes its axes as an input instead of an attribute
AXES_INPUT_FROM = {"ReduceSum": 13}


@handler(*REDUCE)
def _reduce(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    if c.opset >= AXES_INPUT_FROM.get(node.op_type, 18):
        axes = _const_ints(c, ins[1], f"{node.op_type}'s axes") if len(ins) > 1 else None
    else:
        axes = attrs.get("axes")
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            c.emit(out, c.data(x), x.shape)
            return
        axes = list(range(x.rank))
    axes = sorted(_norm_axis(c, a, x.rank) for a in axes)
    keep = bool(attrs.get("keepdims", 1))
    known = tuple(1 if k in axes else d for k, d in enumerate(x.shape) if keep or k not in axes)
    shape = _out_shape(c, out, known)
    if x.nhwc and keep:
        a = sorted(_nhwc_axis(k) for k in axes)
        c.emit(out, REDUCE[node.op_type].format(x=x.name, a=fmt_list(a), k="true"), shape, nhwc=True)
        return
    c.emit(out, REDUCE[node.op_type].format(x=c.data(x), a=fmt_list(axes), k=str(keep).lower()), shape)


@handler("ArgMax", "ArgMin")
def _arg(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    if attrs.get("select_last_index", 0):
        raise c.fail("select_last_index=1 is not supported (dlc picks the first extremum)")
    axis = _norm_axis(c, attrs.get("axis", 0), x.rank)
    fn = node.op_type.lower()
    expr = f"{fn}({c.data(x)}, axis={axis})"
    shape = _out_shape(c, out)
    if attrs.get("keepdims", 1):
        expr = f"reshape({expr}, {fmt_shape(shape)})"
    c.emit(out, expr, shape)


@handler("RMSNormalization")
def _rms_norm(c, node, ins, attrs):
    x, scale = ins[:2]
    out = _one_out(c, node)
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    eps = fmt_num(attrs.get("epsilon", 1e-5))
    axes = fmt_list(range(axis, x.rank))
    xs, shape = c.data(x), _out_shape(c, out, x.shape)
    if scale.shape == tuple(x.shape[axis:]):  # PyTorch's RMSNorm
        c.emit(out, f"rms_norm({xs}, {c.data(scale)}, axis={axes}, eps={eps})", shape)
        return
    expr = f"{xs} * rsqrt(mean(square({xs}), axis={axes}, keepdims=true) + {eps}) * {c.data(scale)}"
    c.emit(out, expr, shape)


@handler("LayerNormalization")
def _layer_norm(c, node, ins, attrs):
    x, scale = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    out = _one_out(c, node)
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    eps = fmt_num(attrs.get("epsilon", 1e-5))
    axes = fmt_list(range(axis, x.rank))
    xs = c.data(x)
    shape = _out_shape(c, out, x.shape)
    normalized = tuple(x.shape[axis:])
    if bias is not None and scale.shape == normalized and bias.shape == normalized:  # PyTorch's LayerNorm
        c.emit(out, f"layer_norm({xs}, {c.data(scale)}, {c.data(bias)}, axis={axes}, eps={eps})", shape)
        return
    m = c.temp(out + "_mean", f"mean({xs}, axis={axes}, keepdims=true)")
    d = c.temp(out + "_centered", f"{xs} - {m}")
    v = c.temp(out + "_var", f"mean(square({d}), axis={axes}, keepdims=true)")
    expr = f"{d} * rsqrt({v} + {eps}) * {c.data(scale)}"
    if bias is not None:
        expr += f" + {c.data(bias)}"
    c.emit(out, expr, shape)
