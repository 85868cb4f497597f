"""ONNX -> .dl: load and normalize a model, fold its constants, write .dl text.

The importer walks the graph once, in order. Every ONNX tensor becomes a
`Value`: a known constant (initializers, Constant nodes and anything computed
from constants only, folded with onnx's reference evaluator), or a named .dl
tensor. Float initializers and large constants become params (their arrays go
to the weights file); small constants are inlined as `const` lines.

Values, the Converter and layouts (NHWC for conv -> relu -> pool chains without
transposes) are in onnx_converter.py; the op handlers in onnx_ops.py and the modules
onnx_handlers.py imports.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference, version_converter

from dlc.runtime.errors import CompileError
from dlc.runtime.npzfile import write_npz
from dlc.runtime.weights import write_atomic

from ..lang import compile_source
from . import onnx_handlers, onnx_ops  # noqa: F401  (onnx_handlers: the handler modules register their ops)
from .fold_limit import DEFAULT_MAX_CONST_BYTES, FoldBudget
from .names import Names, saved_key
from .onnx_checks import ImportError_, check_dims, check_file, check_model
from .onnx_converter import TO_NCHW, Converter, Value, fmt_list, fmt_shape
from .onnx_types import FLOAT_TYPES, INT_TYPES, shape_of, type_name

TARGET_OPSET = 13  # older models are brought here by onnx's version converter


@dataclass
class Imported:
    """What `dlc.import_onnx` returns."""

    model: Any  # the compiled graph here; dlc.import_onnx gives a dlc.Model (as dlc.compile)
    weights: dict[str, np.ndarray]
    source: str
    inputs: dict[str, str]  # ONNX graph input -> .dl input
    outputs: dict[str, str]  # ONNX graph output -> .dl tensor
    states: dict[str, np.ndarray] = field(default_factory=dict)  # a training BatchNormalization's

    def save(self, dl_path: str | os.PathLike, weights_path: str | os.PathLike | None = None) -> str:
        """Write the .dl text and the weights (default: MODEL.weights.npz beside it)."""
        dl_path = os.fspath(dl_path)
        weights_path = weights_path or weights_path_for(dl_path)
        write_atomic(dl_path, lambda f: f.write(self.source.encode("utf-8")))
        write_atomic(os.fspath(weights_path), lambda f: write_npz(f, {**self.weights, **self.states}))
        return os.fspath(weights_path)


def weights_path_for(dl_path: str) -> str:
    base = dl_path[:-3] if dl_path.endswith(".dl") else dl_path
    return base + ".weights.npz"


# -- loading -----------------------------------------------------------------------


def load_model(path_or_model, batch: str | int | None):
    """The model, checked (onnx_checks), with its opset brought to TARGET_OPSET where older,
    the batch dim set, and shapes inferred."""
    if isinstance(path_or_model, (str, os.PathLike)):
        path = os.fspath(path_or_model)
        check_file(path)
        try:  # external data are read by check_model, from inside the model's folder only
            model = onnx.load(path, load_external_data=False)
        except Exception as e:  # the protobuf parser's errors name no type worth keeping
            raise ImportError_(f"{path}: not a readable ONNX model ({e})") from None
        where = path
        check_model(model, where, os.path.dirname(os.path.abspath(path)))
    else:
        model, where = onnx.ModelProto(), "the ONNX model"
        model.CopyFrom(path_or_model)  # the batch dim is set below: leave the caller's as it is
        check_model(model, where, None)
    opset = _opset(model)
    if opset < TARGET_OPSET:
        try:
            model = version_converter.convert_version(model, TARGET_OPSET)
            opset = TARGET_OPSET
        except Exception:  # the converter lacks some adapters: keep the model's own opset
            pass
    inits = {t.name for t in model.graph.initializer}
    fixed: set[int] = set()  # the batch sizes the inputs had
    if batch is not None:
        # Shapes stored in the file spell out the old batch size: infer them again.
        del model.graph.value_info[:]
        for o in model.graph.output:
            if o.type.tensor_type.HasField("shape"):
                o.type.tensor_type.ClearField("shape")
        for i in model.graph.input:
            if i.name in inits:
                continue
            dims = i.type.tensor_type.shape.dim
            if dims:
                if dims[0].HasField("dim_value"):
                    fixed.add(dims[0].dim_value)
                if isinstance(batch, int):
                    dims[0].dim_value = batch
                else:
                    dims[0].dim_param = batch
    model = _infer(model, where)
    if isinstance(batch, str) and _keep_batch_in_reshapes(model, batch, fixed):
        del model.graph.value_info[:]
        model = _infer(model, where)
    check_dims(model, where)  # inferred shapes too
    return model, opset, where


def _infer(model, where: str):
    try:
        return shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:
        raise ImportError_(f"{where}: ONNX shape inference failed: {e}") from None


def _keep_batch_in_reshapes(model, batch: str, fixed: set[int]) -> bool:
    """Exported models often reshape to a constant shape that spells out the batch size
    they were exported with ([1, 2048]). Where such a Reshape gets a tensor whose first dim
    is the symbolic batch and its other dims hold all the rest, its first target dim becomes
    0 (ONNX: "copy the input's dim"), so the batch dim flows through. Says if any changed."""
    shapes = {vi.name: shape_of(vi.type) for vi in [*model.graph.value_info, *model.graph.input]}
    inits = {t.name: t for t in model.graph.initializer}
    changed = False
    for n in model.graph.node:
        if n.op_type != "Reshape" or n.input[1] not in inits:
            continue
        x = shapes.get(n.input[0])
        target = numpy_helper.to_array(inits[n.input[1]])
        if not x or x[0] != batch or target.ndim != 1 or not len(target) or int(target[0]) not in fixed:
            continue
        rest = x[1:]
        if (
            any(isinstance(d, str) for d in rest)
            or any(int(t) <= 0 for t in target[1:])
            or int(np.prod(rest)) != int(np.prod(target[1:]))
        ):
            continue
        new = target.copy()
        new[0] = 0
        t = numpy_helper.from_array(new, n.input[1] + "__batch")
        model.graph.initializer.append(t)
        n.input[1] = t.name
        for a in n.attribute:  # the 0 must mean "copy", not an empty dim (torch.export writes allowzero=1)
            if a.name == "allowzero":
                a.i = 0
        changed = True
    return changed


def _opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 1


def import_onnx(
    path_or_model,
    batch: str | int | None = None,
    max_const_bytes: int | None = None,
    freeze: Sequence[str] = (),
    trainable: Sequence[str] | None = None,
):
    """Import an ONNX model: see `Imported`. `batch` makes the inputs' first dim that
    symbolic name (or that int); `max_const_bytes` bounds constant folding (fold_limit;
    None: DEFAULT_MAX_CONST_BYTES).
    `freeze` and `trainable`: globs of param names (ONNX's or the .dl's) to write as
    `frozen param`, or to leave trainable with all others frozen."""
    budget = FoldBudget(DEFAULT_MAX_CONST_BYTES if max_const_bytes is None else max_const_bytes)
    model, opset, where = load_model(path_or_model, batch)
    g = model.graph
    shapes: dict[str, tuple] = {}
    types: dict[str, int] = {}
    for vi in [*g.value_info, *g.input, *g.output]:
        s = shape_of(vi.type)
        if s is not None:
            shapes[vi.name] = s
        types[vi.name] = vi.type.tensor_type.elem_type
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    outputs = [o.name for o in g.output]
    names = Names()
    at = f"{where}: " if isinstance(path_or_model, (str, os.PathLike)) else ""
    conv = Converter(opset, names, set(outputs), at, budget)
    conv.freeze, conv.trainable = tuple(freeze), None if trainable is None else tuple(trainable)
    conv.shapes, conv.types, conv.dim_names = shapes, types, {}
    conv.input_dims = set()  # the ONNX names of the inputs' symbolic dims
    conv.known_dims = set()  # their .dl names: the only symbolic names a .dl shape may hold
    conv.used = {i for n in g.node for i in n.input if i} | set(outputs)

    # Inputs: graph inputs without an initializer.
    inputs: dict[str, str] = {}
    header = [f"# imported from ONNX by dlc (opset {opset}); params are in the weights file"]
    for i in g.input:
        if i.name in inits:
            continue
        shape = shapes.get(i.name)
        if shape is None:
            raise ImportError_(f"{at}graph input '{i.name}' has no known shape")
        conv.input_dims.update(d for d in shape if isinstance(d, str))
        shape = tuple(_dim_name(d, names, conv.dim_names) for d in shape)
        conv.known_dims.update(d for d in shape if isinstance(d, str))
        et = i.type.tensor_type.elem_type
        if et not in FLOAT_TYPES and et not in INT_TYPES:
            raise ImportError_(
                f"{at}graph input '{i.name}' has element type "
                f"{type_name(et)}: dlc's inputs are float32 or i32 (integers and bools)"
            )
        name = names.new(i.name)
        dtype = "i32" if et in INT_TYPES else ""  # token ids, masks: fed as int32
        conv.decls.append(f"input {name}: {dtype}{fmt_shape(shape)}")
        conv.values[i.name] = Value(shape, name, onnx_name=i.name, i32=bool(dtype))
        inputs[i.name] = name
    weights = weight_initializers(g, inits)
    for k, a in inits.items():
        conv.set_const(k, a, param=k in weights)

    conv.bn_after = onnx_ops.batch_norms_after_convs(list(g.node), set(outputs))
    conv.skip = set()
    for node in g.node:
        conv.node = node
        onnx_ops.convert_node(conv, node)
    conv.node = None

    out_names: dict[str, str] = {}
    for o in outputs:
        v = conv.values.get(o)
        if v is None:
            raise ImportError_(f"{at}graph output '{o}' is not computed by any node")
        if v.name is not None and not v.nhwc and v.onnx_name == o:
            out_names[o] = v.name
        elif v.name is None and v.const is not None:
            out_names[o] = conv.declare_const(o, v.const, v.param)
        else:
            out_names[o] = conv.temp(
                o, conv.data(v) if not v.nhwc else f"transpose({v.name}, perm={fmt_list(TO_NCHW)})"
            )
    for pattern in (*conv.freeze, *(conv.trainable or ())):
        if pattern not in conv.matched:
            raise ImportError_(f"the pattern '{pattern}' matches no param of the model")
    source = conv.source("\n".join(header))
    try:
        compiled = compile_source(source, "<imported>")
    except CompileError as e:  # a bug in the importer, shown with the text it wrote
        raise ImportError_(f"{at}the imported .dl does not compile: {e}") from None
    # weights are saved under their ONNX names (`0.weight`), which loading maps back (saved_names)
    saved = {saved_key(names.asked[n], n): a for n, a in conv.weights.items()}
    return Imported(compiled, saved, source, inputs, out_names, conv.states)


# Inputs that are not data: (op, input index); None: all of the op's inputs.
NOT_DATA = {
    ("Pow", 1), ("Where", 0), ("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Gather", 1), ("Clip", 1), ("Clip", 2),
    ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Pad", 1), ("Pad", 2), ("Split", 1), ("Squeeze", 1),
    ("Unsqueeze", 1), ("ReduceSum", 1), ("Resize", 1), ("Resize", 2), ("Resize", 3), ("Dropout", 1),
    ("Dropout", 2), ("OneHot", 1), ("OneHot", 2), ("CumSum", 1), ("TopK", 1),
    ("BatchNormalization", 3), ("BatchNormalization", 4),  # running statistics: never trained by gradient
}  # fmt: skip
NOT_DATA_OPS = {"Shape", "Size", "Range", "ConstantOfShape", "Equal", "Less", "LessOrEqual", "Greater",
                "GreaterOrEqual", "And", "Or", "Not", "Xor", "Trilu"}  # fmt: skip


def weight_initializers(graph, inits: dict[str, np.ndarray]) -> set[str]:
    """The initializers that become trainable params: float ones of more than one element
    with a use as data. Exponents, scales, eps, shapes, masks and indices are constants
    (scalars are: a scale PyTorch saved as an initializer, GELU's 3.0)."""
    data = set()
    for n in graph.node:
        for k, i in enumerate(n.input):
            if i in inits and n.op_type not in NOT_DATA_OPS and (n.op_type, k) not in NOT_DATA:
                data.add(i)
    return {k for k, a in inits.items() if k in data and np.issubdtype(a.dtype, np.floating) and a.size > 1}


def _dim_name(d, names: Names, seen: dict[str, str]):
    if isinstance(d, int):
        return d
    if d not in seen:
        seen[d] = names.new(d)
    return seen[d]
