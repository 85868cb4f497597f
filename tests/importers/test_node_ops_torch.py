"""The ops of compiler/importers/onnx_{resize,norms,conv,attention,grid_sample,quant,control,
training}.py against PyTorch (torch.onnx.export of F.interpolate, GroupNorm, InstanceNorm,
Conv3d, the 3-D and dilated pools, ConvTranspose with output_size; GridSample against
F.grid_sample) on numpy and GL, a fine-tune of a
GroupNorm + Resize model (3 Adam steps match PyTorch's), and hand-built graphs for what
exporters write less often (Attention against PyTorch's scaled_dot_product_attention, a
constant-weight DequantizeLinear, If with a constant condition, a training Dropout)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import dlc

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _export(torch, module, x, path, **kw):
    module.eval()
    torch.onnx.export(
        module,
        (torch.from_numpy(x),),
        str(path),
        dynamo=False,
        **kw,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "B"}, "y": {0: "B"}},
    )


def _session(imported, backend, source=None):
    sess = dlc.Session(imported.model if source is None else dlc.compile(source), backend=backend)
    sess.set_params(imported.weights)
    return sess


def _run(imported, x, backend="numpy"):
    return _session(imported, backend).eval(imported.outputs["y"], {imported.inputs["x"]: x})


class _Interp:
    def __init__(self, torch, **kw):
        self.kw = kw
        self.f = torch.nn.functional.interpolate

    def __call__(self, x):
        return self.f(x, **self.kw)


def _module(torch, fn):
    class M(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    return M()


def _nets(torch):
    """name -> (module, input shape [without the batch])."""
    nn = torch.nn
    torch.manual_seed(0)
    interp = {
        "nearest_x2": dict(scale_factor=2, mode="nearest"),
        "nearest_size": dict(size=(7, 5), mode="nearest"),
        "bilinear": dict(scale_factor=2, mode="bilinear", align_corners=False),
        "bilinear_corners": dict(size=(9, 7), mode="bilinear", align_corners=True),
        "bilinear_down": dict(scale_factor=0.5, mode="bilinear", align_corners=False),
        "bicubic": dict(scale_factor=2, mode="bicubic", align_corners=False),
        "bicubic_corners": dict(size=(6, 10), mode="bicubic", align_corners=True),
        "linear_1d": dict(scale_factor=3, mode="linear", align_corners=False),
    }
    nets = {
        f"interpolate_{k}": (_module(torch, _Interp(torch, **kw)), (3, 4) if k == "linear_1d" else (3, 4, 5))
        for k, kw in interp.items()
    }
    nets.update(
        {
            "group_norm": (nn.GroupNorm(2, 6), (6, 4, 5)),
            "group_norm_1d": (nn.GroupNorm(3, 6), (6, 7)),
            "instance_norm": (nn.InstanceNorm2d(4, affine=True), (4, 5, 6)),
            "conv3d": (
                nn.Conv3d(2, 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1)),
                (2, 5, 6, 7),
            ),
            "conv3d_groups": (nn.Conv3d(4, 4, 3, padding="same", groups=2, bias=False), (4, 4, 5, 3)),
            "max_pool3d": (nn.MaxPool3d(3, stride=2, padding=1), (2, 5, 6, 7)),
            "avg_pool3d": (
                nn.AvgPool3d((2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), count_include_pad=False),
                (2, 4, 6, 5),
            ),
            "avg_pool3d_ceil": (nn.AvgPool3d(2, ceil_mode=True), (2, 5, 5, 5)),
            "max_pool2d_dilated": (nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True), (3, 7, 6)),
            "max_pool1d_dilated": (nn.MaxPool1d(3, stride=2, padding=1, dilation=3), (3, 11)),
            "conv_transpose1d": (nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), (3, 6)),
            "conv_instance_norm": (  # normalized in NHWC, after a conv
                nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True), nn.ReLU(), nn.Conv2d(4, 2, 1)),
                (3, 6, 5),
            ),
            "conv_upsample_conv": (  # resized in NHWC, between two convs
                nn.Sequential(nn.Conv2d(3, 4, 3), nn.Upsample(scale_factor=2, mode="bilinear"), nn.Conv2d(4, 2, 3)),
                (3, 6, 5),
            ),
        }
    )
    with torch.no_grad():  # affine parameters that are not the identity
        for m, _ in nets.values():
            if isinstance(m, (nn.GroupNorm, nn.InstanceNorm2d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return nets


NAMES = [
    *(f"interpolate_{k}" for k in ("nearest_x2", "nearest_size", "bilinear", "bilinear_corners", "bilinear_down")),
    *("interpolate_bicubic", "interpolate_bicubic_corners", "interpolate_linear_1d"),
    *("group_norm", "group_norm_1d", "instance_norm", "conv3d", "conv3d_groups", "max_pool3d", "avg_pool3d"),
    *("avg_pool3d_ceil", "max_pool2d_dilated", "max_pool1d_dilated", "conv_transpose1d", "conv_upsample_conv"),
    "conv_instance_norm",
]
GL_NAMES = [
    "conv_upsample_conv",
    "conv_instance_norm",
    "interpolate_bilinear",
    "interpolate_bicubic_corners",
    "group_norm",
    "instance_norm",
    "conv3d",
    "max_pool3d",
]


@pytest.fixture(scope="module")
def exported(onnx, torch, tmp_path_factory):
    nets = _nets(torch)
    folder = tmp_path_factory.mktemp("ops")

    def get(name):
        module, shape = nets[name]
        x = np.random.default_rng(2).normal(size=(3, *shape)).astype(np.float32)
        path = folder / f"{name}.onnx"
        if not path.exists():
            _export(torch, module, x[:2], path)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        return dlc.import_onnx(path, batch="B"), x, want

    return get


@pytest.mark.parametrize("name", NAMES)
def test_matches_pytorch_on_numpy(name, exported):
    imported, x, want = exported(name)
    np.testing.assert_allclose(_run(imported, x), want, rtol=1e-4, atol=1e-5)


@pytest.mark.gl
@pytest.mark.parametrize("name", GL_NAMES)
def test_matches_pytorch_on_gl(name, exported, gl):
    imported, x, want = exported(name)
    np.testing.assert_allclose(_run(imported, x, "gl"), want, rtol=1e-4, atol=1e-5)


def test_a_resize_or_instance_norm_between_convs_stays_nhwc(exported):
    for name in ("conv_upsample_conv", "conv_instance_norm"):
        imported, _, _ = exported(name)
        assert imported.source.count("transpose(") == 2  # into NHWC once, back to NCHW for the output


def test_conv_transpose_output_size_is_output_shape(onnx, torch, tmp_path):
    """ConvTranspose's output_shape attribute (PyTorch's output_size) and auto_pad."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    w = rng.normal(size=(3, 2, 3, 3)).astype(np.float32)
    for attrs, size in (({"output_shape": [10, 11]}, (10, 11)), ({"auto_pad": "SAME_UPPER"}, (8, 10))):
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], **attrs)
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, *size])],
            [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.reshape(-1))],
        )
        imported = dlc.import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
        full = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()
        if "output_shape" in attrs:  # the full output (9 x 11) grown with zeros at the end
            want = np.zeros((2, 2, *size), np.float32)
            want[:, :, :9, :11] = full
        else:  # SAME_UPPER: input * stride, the pads split with the smaller half first
            want = full[:, :, 0:8, 0:10]
        np.testing.assert_allclose(_run(imported, x), want, rtol=1e-4, atol=1e-5)


def test_adam_steps_on_group_norm_and_resize_match_pytorch(onnx, torch, tmp_path):
    """A conv -> GroupNorm -> bilinear upsample -> conv net, imported, then 3 Adam steps of
    a cross-entropy loss: the losses are PyTorch's on the original module."""
    nn = torch.nn
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.norm = nn.GroupNorm(2, 4)
            self.head = nn.Conv2d(4, 3, 3, stride=2)
            self.fc = nn.Linear(3 * 3 * 3, 3)

        def forward(self, x):
            h = torch.relu(self.norm(self.conv(x)))
            h = nn.functional.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
            return self.fc(torch.flatten(self.head(h), 1))

    module = Net()
    with torch.no_grad():
        module.norm.weight.uniform_(0.5, 1.5)
        module.norm.bias.uniform_(-0.5, 0.5)
    x = np.random.default_rng(3).normal(size=(4, 2, 4, 4)).astype(np.float32)
    path = tmp_path / "net.onnx"
    _export(torch, module, x[:2], path)
    imported = dlc.import_onnx(path, batch="B")
    trainable = [line for line in imported.source.splitlines() if line.startswith("param ")]
    assert len(trainable) == len(list(module.parameters()))  # GroupNorm's affine ones too
    targets = np.array([0, 2, 1, 2])
    source = imported.source + f"input t: i32[B]\nloss cost = softmax_cross_entropy({imported.outputs['y']}, t)\n"
    sess = _session(imported, "numpy", source)
    losses = sess.train(
        {imported.inputs["x"]: x, "t": targets}, optimizer=dlc.Adam(1e-2), batch_size=4, steps=3, shuffle=False
    )

    module = copy.deepcopy(module).double().train()
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(module(torch.from_numpy(x).double()), torch.from_numpy(targets))
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=2e-4)


# -- hand-built graphs ------------------------------------------------------------------


def test_group_normalization_matches_pytorch_group_norm(onnx, torch):
    """GroupNormalization itself (PyTorch's exporters write GroupNorm as InstanceNormalization
    over [N, G, -1], checked above): opset 21's per-channel scale and bias."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 6, 4, 5)).astype(np.float32)
    scale, bias = rng.normal(size=6).astype(np.float32), rng.normal(size=6).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-4)
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 6, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 6, 4, 5])],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")],
        opset=21,
    )
    imported = dlc.import_onnx(model)
    T = torch.from_numpy
    want = torch.nn.functional.group_norm(T(x), 3, T(scale), T(bias), eps=1e-4).numpy()
    np.testing.assert_allclose(_run(imported, x), want, rtol=1e-4, atol=1e-5)


def _model(nodes, inputs, outputs, inits=(), opset=23):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("case", ["plain", "causal", "gqa_causal_3d", "bool_mask", "float_mask_softcap", "past_causal"])
def test_attention_matches_pytorch_sdpa(case, onnx, torch):
    imported, feeds, want = _attention_case(case, torch)
    got = _session(imported, "numpy").eval(imported.outputs["y"], {imported.inputs[n]: a for n, a in feeds.items()})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if case == "plain":  # the fused kernel's case: also with PyTorch's own sdpa
        T = torch.from_numpy
        sdpa = torch.nn.functional.scaled_dot_product_attention(T(feeds["q"]), T(feeds["k"]), T(feeds["v"])).numpy()
        np.testing.assert_allclose(got, sdpa, rtol=1e-4, atol=1e-5)
        assert "attention(" in imported.source


@pytest.mark.gl
@pytest.mark.parametrize("case", ["plain", "causal", "gqa_causal_3d", "bool_mask"])
def test_attention_on_gl(case, onnx, torch, gl):
    imported, feeds, want = _attention_case(case, torch)
    got = _session(imported, "gl").eval(imported.outputs["y"], {imported.inputs[n]: a for n, a in feeds.items()})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _attention_case(case, torch):
    """(imported model, feeds, PyTorch's output in float64) for an Attention node."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(5)
    b, hq, hk, t, d = 2, 4, 4, 5, 8
    attrs, past = {}, 0
    if case.startswith("gqa"):
        hk = 2
    if "causal" in case:
        attrs["is_causal"] = 1
    if case == "past_causal":
        past = 3
    q = rng.normal(size=(b, hq, t, d)).astype(np.float32)
    k = rng.normal(size=(b, hk, t, d)).astype(np.float32)
    v = rng.normal(size=(b, hk, t, d)).astype(np.float32)
    pk = rng.normal(size=(b, hk, past, d)).astype(np.float32)
    pv = rng.normal(size=(b, hk, past, d)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v}
    names = ["q", "k", "v"]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()]
    mask = None
    if case == "bool_mask":
        mask = rng.random((t, t)) > 0.3
        mask[:, 0] = True
        feeds["m"] = mask
        inputs.append(helper.make_tensor_value_info("m", TensorProto.BOOL, mask.shape))
        names.append("m")
    if case == "float_mask_softcap":
        mask = rng.normal(size=(1, hq, t, t)).astype(np.float32)
        feeds["m"] = mask
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, mask.shape))
        names.append("m")
        attrs["softcap"] = 2.0
    if past:
        names += ["", "pk", "pv"]
        feeds.update(pk=pk, pv=pv)
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, feeds[n].shape) for n in ("pk", "pv")]
    if case.endswith("3d"):  # [B, T, heads * D] inputs
        for n, h in (("q", hq), ("k", hk), ("v", hk)):
            feeds[n] = feeds[n].transpose(0, 2, 1, 3).reshape(b, t, h * d)
        inputs[:3] = [helper.make_tensor_value_info(n, TensorProto.FLOAT, feeds[n].shape) for n in ("q", "k", "v")]
        attrs.update(q_num_heads=hq, kv_num_heads=hk)
    node = helper.make_node("Attention", names, ["y"], **attrs)
    y_shape = (b, t, hq * d) if case.endswith("3d") else (b, hq, t, d)
    model = _model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)])
    imported = dlc.import_onnx(model)

    T = torch.from_numpy
    kk, vv = np.concatenate([pk, k], axis=2), np.concatenate([pv, v], axis=2)
    kk, vv = np.repeat(kk, hq // hk, axis=1), np.repeat(vv, hq // hk, axis=1)
    s = T(q).double() @ T(kk).double().transpose(-1, -2) / np.sqrt(d)
    if "softcap" in attrs:
        s = 2.0 * torch.tanh(s / 2.0)
    if case == "bool_mask":
        s = s.masked_fill(~T(mask), float("-inf"))
    elif mask is not None:
        s = s + T(mask).double()
    if "is_causal" in attrs:
        allowed = torch.ones(t, t + past, dtype=torch.bool).tril(diagonal=past)
        s = s.masked_fill(~allowed, float("-inf"))
    want = (torch.softmax(s, -1) @ T(vv).double()).numpy()
    if case.endswith("3d"):
        want = want.transpose(0, 2, 1, 3).reshape(b, t, hq * d)
    return imported, feeds, want


def test_a_constant_weight_dequantize_becomes_a_frozen_param(onnx):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    wq = rng.integers(-128, 128, size=(6, 4)).astype(np.int8)
    scale = np.float32(0.02)
    zp = np.int8(3)
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(scale), "s")]
    inits.append(numpy_helper.from_array(np.array(zp), "zp"))
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])],
        inits,
        opset=21,
    )
    imported = dlc.import_onnx(model)
    assert "frozen param w: [6, 4]" in imported.source
    x = rng.normal(size=(3, 6)).astype(np.float32)
    want = x @ ((wq.astype(np.float32) - 3) * scale)
    np.testing.assert_allclose(_run(imported, x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition_inlines_the_taken_branch(cond, onnx):
    from onnx import TensorProto, helper, numpy_helper

    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["b"])], "then", [], [out])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["b"], name="neg")], "else", [], [out])
    nodes = [
        helper.make_node("If", ["c"], ["t"], then_branch=then, else_branch=other),
        helper.make_node("Mul", ["t", "x"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(cond), "c")],
        opset=17,
    )
    imported = dlc.import_onnx(model)
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    want = (np.maximum(x, 0) if cond else -x) * x
    np.testing.assert_allclose(_run(imported, x), want, rtol=1e-6)


def test_if_with_a_run_time_condition_is_refused(onnx):
    from onnx import TensorProto, helper

    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["b"])], "br", [], [out])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    model = _model(
        [node],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        opset=17,
    )
    from dlc.compiler.importers.onnx_model import ImportError_

    with pytest.raises(ImportError_, match=r"node 'y' \(If.*condition must be known at import"):
        dlc.import_onnx(model)


def test_a_training_dropout_is_dlc_dropout(onnx):
    """Dropout with training_mode true: dlc's dropout, the identity in eval; a training step
    zeroes about ratio of the elements and scales the rest by 1 / (1 - ratio)."""  # noqa: D401
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Dropout", ["h", "r", "mode"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((4, 64), np.float32), "w"),
        numpy_helper.from_array(np.array(0.25, np.float32), "r"),
        numpy_helper.from_array(np.array(True), "mode"),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 64])],
        inits,
        opset=17,
    )
    imported = dlc.import_onnx(model)
    assert "dropout(h, 0.25)" in imported.source
    x = np.ones((8, 4), np.float32)
    np.testing.assert_allclose(_run(imported, x), np.full((8, 64), 4.0))
    # one SGD step (lr 1) on mean(y): w[i, j] falls by (kept rows of column j) / (1 - 0.25) / 512
    sess = _session(imported, "numpy", imported.source + f"loss cost = mean({imported.outputs['y']})\n")
    sess.train({imported.inputs["x"]: x}, optimizer=dlc.SGD(1.0), batch_size=8, steps=1, shuffle=False)
    kept = (1.0 - sess.params["w"][0]) * 512 * 0.75
    np.testing.assert_allclose(kept, np.round(kept), atol=1e-3)  # whole rows kept, scaled by 1 / 0.75
    assert 0.6 < kept.mean() / 8 < 0.9  # about 1 - ratio of them


def test_a_training_batch_norm_is_dlc_batch_norm(onnx, tmp_path):
    """BatchNormalization with training_mode=1: dlc's batch_norm. Eval normalizes by the
    running statistics (states starting from ONNX's: the import's `states`, also in the
    weights file it saves); a training step updates them by the batch's, weighted by
    1 - ONNX's momentum (PyTorch's rule: the unbiased variance)."""
    from onnx import TensorProto, helper, numpy_helper

    c = 3
    node = helper.make_node(
        "BatchNormalization", ["h", "g", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, momentum=0.8, epsilon=1e-3
    )
    inits = [
        numpy_helper.from_array(np.eye(4, c, dtype=np.float32) * 2, "w"),
        numpy_helper.from_array(np.array([1.0, 2.0, 0.5], np.float32), "g"),
        numpy_helper.from_array(np.array([0.0, -1.0, 1.0], np.float32), "b"),
        numpy_helper.from_array(np.array([0.5, -1.0, 0.0], np.float32), "m"),
        numpy_helper.from_array(np.array([1.0, 4.0, 0.25], np.float32), "v"),
    ]
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", c])],
        inits,
        opset=15,
    )
    imported = dlc.import_onnx(model)
    assert "batch_norm(h, g, b, mean=y_running_mean, var=y_running_var, momentum=0.2" in imported.source
    x = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    h = x @ (np.eye(4, c) * 2)
    mean, var = np.array([0.5, -1.0, 0.0]), np.array([1.0, 4.0, 0.25])
    want = (h - mean) / np.sqrt(var + 1e-3) * [1.0, 2.0, 0.5] + [0.0, -1.0, 1.0]
    sess = _session(imported, "numpy")
    sess.set_states(imported.states)
    np.testing.assert_allclose(sess.eval("y", {imported.inputs["x"]: x}), want, rtol=1e-5, atol=1e-6)
    sess = _session(imported, "numpy", imported.source + "loss cost = mean(y)\n")
    sess.set_states(imported.states)
    sess.train({imported.inputs["x"]: x}, optimizer=dlc.SGD(0.0), batch_size=6, steps=1, shuffle=False)
    np.testing.assert_allclose(sess.states["y_running_mean"], 0.8 * mean + 0.2 * h.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.states["y_running_var"], 0.8 * var + 0.2 * h.var(0, ddof=1), rtol=1e-5)
    # the weights file `save` writes holds the states too: Session.load sets them
    weights = imported.save(tmp_path / "bn.dl")
    sess = _session(imported, "numpy")
    sess.load(weights)
    np.testing.assert_allclose(sess.states["y_running_var"], var, rtol=1e-6)


def _resize_with_inf_and_nan(mode):
    from onnx import TensorProto, helper, numpy_helper

    x = np.arange(2 * 6 * 5, dtype=np.float32).reshape(1, 2, 6, 5) / 10
    x[0, 0, 1, 2], x[0, 1, 4, 0], x[0, 1, 2, 3] = np.inf, -np.inf, np.nan
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode)
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 9, 10])],
        [numpy_helper.from_array(np.array([1, 1, 1.5, 2], np.float32), "s")],
        opset=19,
    )
    return model, x


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_of_inf_and_nan(mode, onnx):
    """Each output reads only its taps: an inf or NaN reaches the outputs whose taps read it.
    ONNX's reference multiplies every tap by its weight, so it also makes NaN (0 x inf) where
    a 0-weight tap reads an inf (next to a nearest pick), and it saturates inf to float32's
    largest value (read back as inf here); elsewhere the values agree."""
    from onnx.reference import ReferenceEvaluator

    model, x = _resize_with_inf_and_nan(mode)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0].astype(np.float64)
    want[np.abs(want) >= np.finfo(np.float32).max] *= np.inf
    got = _run(dlc.import_onnx(model), x)
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(got) | ~finite)  # non-finite only where the reference is too
    assert np.isnan(got).any() and np.isinf(got).any()
    if mode == "nearest":  # a copy: each non-finite input lands exactly where it is picked
        marked = np.where(np.isnan(x), 300.0, np.where(np.isposinf(x), 100.0, np.where(np.isneginf(x), 200.0, x)))
        picks = ReferenceEvaluator(model).run(None, {"x": marked.astype(np.float32)})[0]
        for marker, where in ((100.0, np.isposinf), (200.0, np.isneginf), (300.0, np.isnan)):
            np.testing.assert_array_equal(where(got), picks == marker)


@pytest.mark.gl
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_of_inf_and_nan_on_gl_is_numpy(mode, onnx, gl):
    model, x = _resize_with_inf_and_nan(mode)
    imported = dlc.import_onnx(model)
    np.testing.assert_array_equal(_run(imported, x, "gl"), _run(imported, x))


def _grid_sample_case(mode, padding, align, torch):
    """(imported GridSample, feeds, F.grid_sample's output) for a 2 x 3 x 5 x 6 input."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 5, 6)).astype(np.float32)
    reach = 1.0 if (mode, padding) == ("bicubic", "border") else 1.4  # beyond 1: outside the image
    grid = rng.uniform(-reach, reach, size=(2, 4, 7, 2)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    model = _model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6])]
        + [helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 4, 7, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 7])],
        opset=16,
    )
    imported = dlc.import_onnx(model)
    want = torch.nn.functional.grid_sample(
        torch.from_numpy(x), torch.from_numpy(grid), mode=mode, padding_mode=padding, align_corners=bool(align)
    ).numpy()
    return imported, {imported.inputs["x"]: x, imported.inputs["g"]: grid}, want


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_pytorch(mode, padding, align, onnx, torch):
    """GridSample against F.grid_sample, points outside the image included, except bicubic
    with border padding: ONNX clamps such a point's coordinate before taking its 4 x 4 taps,
    PyTorch clamps each tap (the node tests check ONNX's way)."""
    imported, feeds, want = _grid_sample_case(mode, padding, align, torch)
    got = _session(imported, "numpy").eval(imported.outputs["y"], feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.gl
@pytest.mark.parametrize("case", [("bilinear", "zeros", 0), ("bicubic", "reflection", 1), ("nearest", "border", 0)])
def test_grid_sample_on_gl(case, onnx, torch, gl):
    imported, feeds, want = _grid_sample_case(*case, torch)
    np.testing.assert_allclose(_session(imported, "gl").eval(imported.outputs["y"], feeds), want, rtol=1e-4, atol=1e-5)
