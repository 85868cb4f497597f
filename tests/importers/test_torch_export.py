"""torch.onnx.export of an MLP and of a small CNN with batch norm: import, match PyTorch's
output (numpy backend and GL), and fine-tune the imported model with `dlc train`."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

# torch.onnx.export(dynamo=False) warns that the TorchScript exporter is legacy.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _export(torch, module, example, path):
    module.eval()
    torch.onnx.export(
        module,
        (example,),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "B"}, "logits": {0: "B"}},
    )


def _mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)
    )


def _cnn(torch):
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(6),
        nn.LeakyReLU(0.1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 3),
    )
    with torch.no_grad():  # statistics that are not the identity, so folding them shows
        for m in net:
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    return net


def _conv1d(torch):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv1d(2, 4, 3, padding=2, dilation=2),
        nn.ReLU(),
        nn.MaxPool1d(2, ceil_mode=True),
        nn.AvgPool1d(3, stride=1, padding=1),
        nn.Conv1d(4, 4, 3, groups=2, stride=2),
        nn.Flatten(),
        nn.Linear(12, 3),
    )


def _deconv(torch):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, stride=2),
        nn.ReLU(),
        nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
        nn.Tanh(),
        nn.ConvTranspose2d(4, 1, 2, dilation=2),
        nn.Flatten(),
        nn.Linear(64, 3),
    )


CASES = {"mlp": (_mlp, (6,)), "cnn": (_cnn, (2, 8, 8)), "conv1d": (_conv1d, (2, 15)), "deconv": (_deconv, (2, 7, 7))}


@pytest.fixture(params=sorted(CASES))
def exported(request, onnx, torch, tmp_path):
    make, shape = CASES[request.param]
    net = make(torch)
    x = np.random.default_rng(1).normal(size=(5, *shape)).astype(np.float32)
    path = tmp_path / f"{request.param}.onnx"
    _export(torch, net, torch.from_numpy(x[:2]), path)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    return path, x, want


def _eval(imported, x, backend):
    sess = dlc.Session(imported.model, backend=backend)
    sess.set_params(imported.weights)
    return sess.eval(imported.outputs["logits"], {imported.inputs["x"]: x})


def test_matches_pytorch_on_numpy(exported):
    path, x, want = exported
    imported = dlc.import_onnx(path, batch="B")
    assert imported.model.inputs[imported.inputs["x"]][0] == "B"
    np.testing.assert_allclose(_eval(imported, x, "numpy"), want, rtol=1e-4, atol=1e-5)


@pytest.mark.gl
def test_matches_pytorch_on_gl(exported, gl):
    path, x, want = exported
    imported = dlc.import_onnx(path, batch="B")
    np.testing.assert_allclose(_eval(imported, x, "gl"), want, rtol=1e-4, atol=1e-5)


def test_fine_tunes_with_dlc_train(exported, tmp_path, dlc_cli):
    run_dlc = dlc_cli
    path, x, _ = exported
    out = tmp_path / "model.dl"
    r = run_dlc("import", path, "-o", out, "--batch", "B")
    assert r.returncode == 0, r.stderr
    imported = dlc.import_onnx(path, batch="B")
    logits = imported.outputs["logits"]
    # A user adds labels and a loss to the imported text, then trains from the imported weights.
    with open(out, "a") as f:
        f.write(f"input label: [B, 3]\nloss cost = softmax_cross_entropy({logits}, label)\n")
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(64, *x.shape[1:])).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 64)]
    data = tmp_path / "data.npz"
    np.savez(data, **{imported.inputs["x"]: xs, "label": labels})
    before = dlc.Session(dlc.compile(out), backend="numpy")
    before.set_params(imported.weights)
    loss0 = float(before.eval("cost", {imported.inputs["x"]: xs, "label": labels}))
    saved = tmp_path / "tuned.npz"
    r = run_dlc(
        "train",
        out,
        "--data",
        data,
        "--init",
        tmp_path / "model.weights.npz",
        "--optimizer",
        "adam",
        "--lr",
        "0.01",
        "--steps",
        "150",
        "--batch-size",
        "16",
        "--backend",
        "numpy",
        "--save",
        saved,
    )
    assert r.returncode == 0, r.stderr
    after = dlc.Session(dlc.compile(out), backend="numpy")
    after.load(str(saved))
    loss1 = float(after.eval("cost", {imported.inputs["x"]: xs, "label": labels}))
    assert loss1 < 0.8 * loss0


def test_an_exported_embedding_imports_its_token_ids_as_i32(torch, tmp_path):
    # nn.Embedding exports as Gather with a run-time int64 input: an i32 input and gather.
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(11, 4), torch.nn.Linear(4, 3)).eval()
    tokens = torch.tensor([[1, 2, 10], [0, 5, 5]])
    path = tmp_path / "emb.onnx"
    torch.onnx.export(
        net, (tokens,), str(path), dynamo=False, input_names=["t"], output_names=["y"], dynamic_axes={"t": {0: "B"}}
    )
    imported = dlc.import_onnx(path)
    assert f"input {imported.inputs['t']}: i32[B, 3]" in imported.source
    want = net(tokens).detach().numpy()
    for backend in ("numpy", "gl"):
        sess = dlc.Session(imported.model, backend=backend)
        sess.set_params(imported.weights)
        got = sess.eval(imported.outputs["y"], {imported.inputs["t"]: tokens.numpy()})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)
