"""An ONNX file is untrusted input: what is checked before any of it is used.

Each check names the file and the initializer, value or node at fault. They run before
onnx's own `checker` (whose message is kept), and before anything is computed from the
model, so a small file that declares a huge tensor is refused rather than allocated.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_tensor

from dlc.runtime.errors import DlcError

MIN_OPSET = 1  # older models go through onnx's version converter (onnx_model.TARGET_OPSET)
SUB_BYTE_TYPES = {21, 22, 23, 25, 26, 27, 28}  # (U)INT4, FLOAT4E2M1, (U)INT2, FLOAT6*: packed
COMPLEX_TYPES = {14, 15}  # two typed-field entries per element


class ImportError_(DlcError):
    """A model dlc cannot import: names the node, op type, opset and what is unsupported."""


def max_opset() -> int:
    """The newest opset of the default domain the installed onnx package knows."""
    return onnx.defs.onnx_opset_version()


def check_file(path: str) -> None:
    """A file that is there and not empty."""
    if not os.path.exists(path):
        raise ImportError_(f"{path}: no such file")
    if os.path.isdir(path):
        raise ImportError_(f"{path}: is a directory, not an ONNX model")
    if os.path.getsize(path) == 0:
        raise ImportError_(f"{path}: the file is empty, not an ONNX model")


def check_model(model, where: str, base_dir: str | None) -> None:
    """Everything the importer relies on, in order: a graph with nodes or outputs, an opset
    in range, initializers whose data match their shapes (external data loaded only from
    inside `base_dir`), no negative dims, then onnx's full check."""
    g = model.graph
    if not g.node and not g.output:
        raise ImportError_(f"{where}: the model has no graph (no nodes and no outputs)")
    check_opset(model, where)
    for t in g.initializer:
        if check_initializer(t, where, base_dir):
            _load_external(t, where, base_dir)  # before the checker, which would look in the cwd
    check_dims(model, where)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ImportError_(f"{where}: onnx's checker refuses the model: {_first_line(e)}") from None
    except ValueError as e:  # over protobuf's 2 GB: too large for the checker and for dlc
        raise ImportError_(f"{where}: onnx's checker cannot check the model: {_first_line(e)}") from None


def check_opset(model, where: str) -> None:
    top = max_opset()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and not MIN_OPSET <= o.version <= top:
            raise ImportError_(
                f"{where}: the model imports opset {o.version} of the default ONNX domain; "
                f"dlc imports opsets {MIN_OPSET} to {top} (the newest the installed onnx package knows)"
            )


def check_dims(model, where: str) -> None:
    """Declared (and inferred) shapes have no negative dims."""
    g = model.graph
    for kind, values in (("graph input", g.input), ("graph output", g.output), ("value", g.value_info)):
        for v in values:
            dims = v.type.tensor_type.shape.dim
            bad = [d.dim_value for d in dims if d.HasField("dim_value") and d.dim_value < 0]
            if bad:
                shape = [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in dims]
                raise ImportError_(f"{where}: {kind} '{v.name}' has a negative dim ({bad[0]}) in its shape {shape}")


def check_initializer(t, where: str, base_dir: str | None) -> bool:
    """The initializer's data hold exactly the elements its dims declare, external data
    included (a file inside `base_dir` only). True when its data are external (not read yet)."""
    what = f"{where}: initializer '{t.name}'"
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise ImportError_(f"{what} has a negative dim in its shape {dims}")
    if t.data_type == TensorProto.UNDEFINED or t.data_type not in TensorProto.DataType.values():
        raise ImportError_(f"{what} has no valid element type ({t.data_type})")
    type_name = TensorProto.DataType.Name(t.data_type)
    if t.data_type in SUB_BYTE_TYPES:
        raise ImportError_(f"{what} has element type {type_name}, which dlc does not import")
    count = int(np.prod(dims, dtype=object)) if dims else 1  # Python ints: no overflow
    declared = f"shape {dims} ({count} {type_name} elements)"
    if t.data_location == TensorProto.EXTERNAL:
        _check_external(t, what, declared, count * _itemsize(t.data_type), base_dir)
        return True
    if t.HasField("raw_data"):
        if t.data_type == TensorProto.STRING:
            raise ImportError_(f"{what} holds strings as raw data, which ONNX does not allow")
        need = count * _itemsize(t.data_type)
        if len(t.raw_data) != need:
            raise ImportError_(f"{what} declares {declared}, {need} bytes, but holds {len(t.raw_data)} bytes of data")
        return False
    field = helper.tensor_dtype_to_field(t.data_type)
    have = len(getattr(t, field))
    need = count * (2 if t.data_type in COMPLEX_TYPES else 1)
    if have != need:
        raise ImportError_(f"{what} declares {declared} but its {field} holds {have} values")
    return False


def _itemsize(data_type: int) -> int:
    return helper.tensor_dtype_to_np_dtype(data_type).itemsize


def _check_external(t, what: str, declared: str, need: int, base_dir: str | None) -> None:
    """An external initializer's file lies inside the model's folder and holds exactly the
    declared bytes at its offset."""
    if base_dir is None:
        raise ImportError_(f"{what} keeps its data in an external file; import the model from its file")
    info = ExternalDataInfo(t)
    loc = info.location or ""
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, loc))
    if not loc or os.path.isabs(loc) or os.path.commonpath([base, path]) != base:
        raise ImportError_(f"{what} keeps its data in '{loc}', which is not a file inside the model's folder")
    if not os.path.isfile(path):
        raise ImportError_(f"{what} keeps its data in '{loc}', which does not exist")
    offset = int(info.offset or 0)
    length = need if info.length is None else int(info.length)
    size = os.path.getsize(path)
    why = (
        "has a negative offset"
        if offset < 0
        else f"has length {length}"
        if length != need
        else f"runs past the end of the file ({size} bytes)"
        if offset + length > size
        else ""
    )
    if why:
        raise ImportError_(
            f"{what} declares {declared}, {need} bytes, but its external data ('{loc}', offset {offset}) {why}"
        )


def _load_external(t, where: str, base_dir: str) -> None:
    """Read a checked external initializer's bytes into it."""
    what, loc = f"{where}: initializer '{t.name}'", ExternalDataInfo(t).location
    try:
        load_external_data_for_tensor(t, os.path.realpath(base_dir))
    except OSError as e:
        raise ImportError_(f"{what}: reading its external data '{loc}' failed: {e}") from None
    t.data_location = 0  # DEFAULT: the bytes are in raw_data now
    del t.external_data[:]


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
