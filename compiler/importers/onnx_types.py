"""What an ONNX type proto says, as the importer reads it: a tensor's shape (ints and
symbolic dim names) and which element types dlc computes as float or as integer."""

from __future__ import annotations

from onnx import TensorProto

FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
INT_TYPES = {2, 3, 4, 5, 6, 7, 9, 12, 13}  # UINT8 INT8 UINT16 INT16 INT32 INT64 BOOL UINT32 UINT64


def shape_of(type_proto) -> tuple | None:
    """The shape of a tensor type: ints and dim names; None when any dim is unknown."""
    t = type_proto.tensor_type
    if not t.HasField("shape"):
        return None
    out = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(d.dim_param)
        else:
            return None
    return tuple(out)


def type_name(elem_type: int) -> str:
    """FLOAT, INT64, ... for an element type code."""
    return TensorProto.DataType.Name(elem_type)
