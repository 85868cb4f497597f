"""Batch norm kept as a node by the exporter (`do_constant_folding=False`): its scale and
shift are trainable params, so the import writes it out over the running statistics instead
of folding it into the conv, and fine-tuning trains `bn.weight` and `bn.bias` under their
names as PyTorch does (module in eval mode). The zoo's residual CNN (NHWC after its convs)
and an MLP with BatchNorm1d (ONNX's layout), against PyTorch and onnxruntime."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import zoo  # tests/importers/zoo.py (pytest puts this folder on the path)

import dlc

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::Warning")


def _mlp(torch):
    nn = torch.nn
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    with torch.no_grad():
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return net.eval(), {"x": torch.randn(2, 4)}


def _cnn(torch):
    torch.manual_seed(0)
    cls, inputs = zoo.MODELS["cnn"](torch)
    return cls().eval(), inputs


@pytest.fixture(params=["cnn", "mlp"])
def exported(request, onnx, torch, tmp_path):
    module, inputs = {"cnn": _cnn, "mlp": _mlp}[request.param](torch)
    path = tmp_path / f"{request.param}.onnx"
    zoo.export_module(torch, module, inputs, path, do_constant_folding=False)
    return path, module, inputs


def test_batch_norm_is_written_out_with_its_state_dict_names(exported, torch):
    path, module, inputs = exported
    imported = dlc.import_onnx(path, batch="B")
    src = imported.source
    trainable = {line.split()[1].rstrip(":") for line in src.splitlines() if line.startswith("param ")}
    assert trainable == {dlc_name(k) for k, _ in module.named_parameters()}
    assert "running_mean" in src and not any("running" in p for p in trainable)
    feeds = zoo.feeds(torch, inputs, 3, seed=7)
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    got = sess.eval(imported.outputs["out"], {imported.inputs[k]: v.numpy() for k, v in feeds.items()})
    with torch.no_grad():
        np.testing.assert_allclose(got, module(*feeds.values()).numpy(), rtol=1e-4, atol=1e-5)


def dlc_name(key: str) -> str:
    """nn.Sequential's `1.weight` is `t_1.weight` in the .dl (its weights file keeps `1.weight`)."""
    return "t_" + key if key[0].isdigit() else key


@pytest.mark.gl
def test_batch_norm_written_out_matches_onnxruntime_on_gl(exported, torch, onnxruntime, gl):
    path, _, inputs = exported
    imported = dlc.import_onnx(path, batch="B")
    feeds = {k: v.numpy() for k, v in zoo.feeds(torch, inputs, 2, seed=8).items()}
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["out"], feeds)[0]
    sess = dlc.Session(imported.model, backend="gl")
    sess.set_params(imported.weights)
    got = sess.eval(imported.outputs["out"], {imported.inputs[k]: v for k, v in feeds.items()})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_adam_steps_train_batch_norm_as_pytorch_does(exported, torch):
    path, module, inputs = exported
    imported = dlc.import_onnx(path, batch="B")
    feeds = zoo.feeds(torch, inputs, 4, seed=9)
    targets = torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(10))
    loss = f"loss cost = softmax_cross_entropy({imported.outputs['out']}, targets)\n"
    sess = dlc.Session(dlc.compile(imported.source + "input targets: i32[B]\n" + loss), backend="numpy")
    sess.set_params(imported.weights)
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    losses = sess.train({**data, "targets": targets.numpy()}, optimizer=dlc.Adam(1e-2), batch_size=4, steps=3)

    module = copy.deepcopy(module).double().eval()  # batch norm on its running statistics
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    want = []
    for _ in range(3):
        opt.zero_grad()
        cost = torch.nn.functional.cross_entropy(module(*[v.double() for v in feeds.values()]), targets)
        cost.backward()
        opt.step()
        want.append(cost.item())
    np.testing.assert_allclose(losses, want, rtol=2e-4)
    tuned = {k: v for k, v in module.state_dict().items() if "running" not in k and "num_batches" not in k}
    for k, v in tuned.items():  # the params themselves, under their names, after the steps
        got = sess.params[dlc_name(k)]
        want_v = v.numpy().T if got.ndim == 2 else v.numpy()  # Gemm's matrices are stored [K, N]
        if got.ndim == 4:
            want_v = v.numpy().transpose(2, 3, 1, 0)  # conv filters: [kh, kw, Cin, Cout]
        np.testing.assert_allclose(got, want_v, rtol=1e-3, atol=1e-5, err_msg=k)
