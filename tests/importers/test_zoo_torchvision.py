"""torchvision's mobilenet_v2 and resnet18 (random weights, 10 classes, 32x32 images) through
both of torch.onnx.export's exporters with a dynamic batch: imported with `batch="B"`, they
match onnxruntime at another batch size on numpy, and 3 Adam steps after the import give the
losses the same steps give in PyTorch on the original module (batch norm on its statistics).

torchvision itself where one built for the installed torch loads; PyPI's torchvision wheels
load only beside PyPI's (CUDA) torch, so beside torch's CPU build the two architectures come
from vision_models.py, written out as torchvision defines them."""

from __future__ import annotations

import copy
import importlib.util
import os
import types

import numpy as np
import pytest
import vision_models  # tests/importers/vision_models.py
import zoo  # tests/importers/zoo.py (pytest puts this folder on the path)

import dlc

# the importer's modules import onnx: without it they skip (CI, DLC_REQUIRE_ONNX=1: fail), as conftest's
if importlib.util.find_spec("onnx") is None and not os.environ.get("DLC_REQUIRE_ONNX"):
    pytest.skip('onnx is not installed (pip install "dlc[onnx]")', allow_module_level=True)

from dlc.compiler.importers.onnx_ops import supported_ops

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::Warning")

EXPORTERS = {"torchscript": False, "dynamo": True}


@pytest.fixture(scope="session")
def torchvision(torch):
    """torchvision where it loads beside this torch, else the same two architectures written
    out (vision_models.py: torchvision's module layout, parameter names and counts)."""
    try:
        import torchvision

        return torchvision
    except (ImportError, RuntimeError):  # RuntimeError: its C++ ops were built against another torch
        return types.SimpleNamespace(models=vision_models.Models(torch))


@pytest.fixture(scope="module")
def exported(request, onnx, torch, torchvision, tmp_path_factory):
    cache = {}

    def get(name, dynamo, **options):
        if dynamo:
            request.getfixturevalue("onnxscript")
        key = (name, dynamo, tuple(sorted(options.items())))
        if key not in cache:
            module, inputs = zoo.vision(torch, torchvision, name)
            path = tmp_path_factory.mktemp("vision") / f"{name}.onnx"
            zoo.export_module(torch, module, inputs, path, dynamo, **options)
            cache[key] = (path, module)
        return cache[key]

    return get


def _images(torch, batch: int, seed: int):
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("name", zoo.VISION)
def test_matches_onnxruntime_with_a_symbolic_batch(name, exporter, exported, torch, onnxruntime):
    path, module = exported(name, EXPORTERS[exporter])
    imported = dlc.import_onnx(path, batch="B")
    assert "unk__" not in imported.source
    assert imported.model.inputs[imported.inputs["x"]][0] == "B"
    x = _images(torch, 3, seed=1)
    ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = ort.run(["out"], {"x": x.numpy()})[0]
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    got = sess.eval(imported.outputs["out"], {imported.inputs["x"]: x.numpy()})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.gl
@pytest.mark.parametrize("name", zoo.VISION)
def test_matches_onnxruntime_on_gl(name, exported, torch, onnxruntime, gl):
    path, _ = exported(name, False)
    imported = dlc.import_onnx(path, batch="B")
    sess = dlc.Session(imported.model, backend="gl")
    sess.set_params(imported.weights)
    x = _images(torch, 2, seed=5)
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["out"], {"x": x.numpy()})[0]
    got = sess.eval(imported.outputs["out"], {imported.inputs["x"]: x.numpy()})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("name", zoo.VISION)
def test_adam_steps_after_the_import_match_pytorch(name, exporter, exported, torch):
    # Both exporters fold batch norm into the convs unless told not to: the TorchScript one
    # renames the filters, the dynamo one (its onnxscript optimizer) keeps conv.weight's name
    # for the folded values.
    options = {"optimize": False} if EXPORTERS[exporter] else {"do_constant_folding": False}
    if EXPORTERS[exporter] and "CastLike" not in supported_ops():
        pytest.skip("the dynamo exporter's unoptimized graph holds CastLike, which this importer lacks")
    path, module = exported(name, EXPORTERS[exporter], **options)
    imported = dlc.import_onnx(path, batch="B")
    trainable = {line.split()[1].rstrip(":") for line in imported.source.splitlines() if line.startswith("param ")}
    assert trainable == {k for k, _ in module.named_parameters()}
    x = _images(torch, 4, seed=3)
    targets = torch.randint(0, 10, (4,), generator=torch.Generator().manual_seed(4))
    loss = f"loss cost = softmax_cross_entropy({imported.outputs['out']}, targets)\n"
    source = imported.source + "input targets: i32[B]\n" + loss
    sess = dlc.Session(dlc.compile(source), backend="numpy")
    sess.set_params(imported.weights)
    data = {imported.inputs["x"]: x.numpy(), "targets": targets.numpy()}
    losses = sess.train(data, optimizer=dlc.Adam(1e-3), batch_size=4, steps=3, shuffle=False)

    module = copy.deepcopy(module).double().eval()  # fine-tuning on the running statistics
    opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(module(x.double()), targets)
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=2e-4)
