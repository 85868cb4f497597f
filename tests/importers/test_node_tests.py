"""ONNX's own node tests (onnx.backend.test.loader) for every op the importer claims, on the
numpy backend. Each one passes, or the importer refuses it with a located ImportError
(an attribute, output or element type dlc does not map; README "Importing ONNX models"
lists them), or it is one of KNOWN_DIFFERENCES below. A wrong answer or an internal error
anywhere else fails.

The node tests feed shapes, axes, pads and repeats as graph inputs; real models hold them as
constants, which is what dlc needs at import, so integer inputs in those places (SHAPE_ARGS)
are made initializers holding the test's values. Other integer and bool inputs (ids, masks,
integer arithmetic) stay inputs, `i32`, where their values are below 2^24 (dlc computes them
in f32); a test with no input left is not counted: import-time folding would compute all of
it."""

from __future__ import annotations

import numpy as np

import dlc

# Casts from 8-bit float inputs (and to bfloat16) round differently from float32.
KNOWN_DIFFERENCES = {
    "test_cast_FLOAT_to_BFLOAT16",
    "test_castlike_FLOAT_to_BFLOAT16",
    "test_castlike_FLOAT_to_BFLOAT16_expanded",
    "test_cast_FLOAT8E4M3FN_to_FLOAT",
    "test_cast_FLOAT8E4M3FN_to_FLOAT16",
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT",
    "test_cast_FLOAT8E4M3FNUZ_to_FLOAT16",
    "test_cast_FLOAT8E5M2_to_FLOAT",
    "test_cast_FLOAT8E5M2_to_FLOAT16",
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT",
    "test_cast_FLOAT8E5M2FNUZ_to_FLOAT16",
    # A training graph's Dropout is dlc's `dropout`: eval (what the test runs) is the identity,
    # and a training step draws dlc's own masks, not those of ONNX's seed.
    "test_training_dropout",
    "test_training_dropout_default",
    # The reference computes these in bfloat16 (8 bits of mantissa each step); dlc in f32.
    "test_attention_4d_causal_bf16",
    "test_attention_4d_attn_mask_causal_bf16",
    "test_attention_3d_causal_bf16",
    "test_attention_4d_padded_kv_bf16",
    "test_attention_4d_causal_padded_kv_bf16",
    "test_celu_bfloat16",
    "test_celu_bfloat16_expanded",
}
FLOATS = (1, 10, 11, 16)


def _array(a, numpy_helper):
    return np.asarray(a) if isinstance(a, (np.ndarray, np.generic, list)) else numpy_helper.to_array(a)


# Inputs that are shapes, axes, pads, counts: constants in real models (initializers here).
SHAPE_ARGS = {
    ("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4),
    ("Pad", 1), ("Pad", 2), ("Pad", 3), ("Split", 1), ("Squeeze", 1), ("Unsqueeze", 1), ("ConstantOfShape", 0),
    ("Range", 0), ("Range", 1), ("Range", 2), ("OneHot", 1), ("OneHot", 2), ("CumSum", 1), ("Trilu", 1),
    ("Clip", 1), ("Clip", 2), ("Dropout", 1), ("Dropout", 2), ("TopK", 1),
    ("Resize", 1), ("Resize", 2), ("Resize", 3), ("Upsample", 1), ("CastLike", 1), ("If", 0),
    ("QuantizeLinear", 1), ("QuantizeLinear", 2), ("DequantizeLinear", 1), ("DequantizeLinear", 2),
    ("CenterCropPad", 1), ("Compress", 1),
}  # fmt: skip


def _is_data(model, name: str) -> bool:
    """An integer or bool input used as data (ids, masks, integer arithmetic): an i32 input."""
    uses = [(n.op_type, k) for n in model.graph.node for k, i in enumerate(n.input) if i == name]
    return all(u not in SHAPE_ARGS and not (u[0].startswith("Reduce") and u[1] == 1) and u[0] != "Shape" for u in uses)


def _is_shape_arg(model, name: str) -> bool:
    """A float input that real models hold as a constant (Resize's scales and roi), or one
    no node reads (CastLike's expanded form leaves its `like` unused)."""
    uses = [(n.op_type, k) for n in model.graph.node for k, i in enumerate(n.input) if i == name]
    return all(u in SHAPE_ARGS for u in uses)


def _fits_i32(a) -> bool:
    """Integers dlc computes exactly (f32 below 2^24) and bools."""
    a = np.asarray(a)
    return a.dtype == bool or (np.issubdtype(a.dtype, np.integer) and a.size and np.abs(a).max() < 2**24)


def _run_case(case, numpy_helper):
    model = type(case.model)()
    model.CopyFrom(case.model)
    inputs, outputs = case.data_sets[0]
    inputs = [_array(a, numpy_helper) for a in inputs]
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for info, a in zip([i for i in model.graph.input if i.name not in inits], inputs):
        if _is_shape_arg(model, info.name):
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(a), info.name))
        elif info.type.tensor_type.elem_type in FLOATS or (_is_data(model, info.name) and _fits_i32(a)):
            feeds[info.name] = a
        else:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(a), info.name))
    if not feeds:  # only shapes and such: folding at import would compute it all; not dlc's to check
        return False
    imported = dlc.import_onnx(model)
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    dl_feeds = {imported.inputs[k]: v for k, v in feeds.items()}
    for out, want in zip(model.graph.output, outputs):
        got = sess.eval(imported.outputs[out.name], dl_feeds)
        want = _array(want, numpy_helper).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5, err_msg=case.name)
    return True


def test_node_tests_of_the_claimed_ops(onnx):
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_model_tests

    from dlc.compiler.importers import onnx_handlers  # noqa: F401  (registers the ops beyond onnx_ops)
    from dlc.compiler.importers.onnx_model import ImportError_
    from dlc.compiler.importers.onnx_ops import supported_ops

    claimed = set(supported_ops())
    passed, refused, wrong = [], [], []
    for case in load_model_tests(kind="node"):
        if case.model is None or not {n.op_type for n in case.model.graph.node} <= claimed:
            continue
        try:
            if _run_case(case, numpy_helper):
                passed.append(case.name)
        except ImportError_ as e:
            why = ("cannot import", "element type", "shape", "compile", "checker refuses")  # test_mvn's Constant
            assert any(w in str(e) for w in why), (case.name, str(e))
            refused.append(case.name)
        except Exception as e:  # a wrong value or an internal error
            if case.name not in KNOWN_DIFFERENCES:
                wrong.append(f"{case.name}: {type(e).__name__}: {str(e)[:300]}")
    assert not wrong, "\n".join(wrong)
    print(f"node tests: {len(passed)} passed, {len(refused)} refused")
    # 1298 with onnx 1.23 (748 before Resize, the norms, Attention, the losses, CastLike, 3-D and
    # dilated pools, quantization; 463 before int inputs, RNNs, Einsum)
    assert len(passed) >= 1290, (len(passed), len(refused))
