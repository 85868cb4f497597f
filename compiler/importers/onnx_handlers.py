"""Imports every module of ONNX op handlers beyond onnx_ops, so that each registers its
ops in onnx_registry.HANDLERS (onnx_model imports this before converting any graph)."""

# ruff: noqa: F401
from . import (
    onnx_attention,
    onnx_control,
    onnx_conv,
    onnx_einsum,
    onnx_grid_sample,
    onnx_losses,
    onnx_misc,
    onnx_norms,
    onnx_quant,
    onnx_resize,
    onnx_rnn,
    onnx_training,
)
