"""The zoo (zoo.py): tiny transformers (an encoder with embeddings, GPT-2 and BERT as
transformers writes them) and LSTM/GRU classifiers, exported by torch.onnx.export with a
dynamic batch, imported with `batch="B"`: they match PyTorch at another batch size (numpy
and GL), keep their state_dict names and constants, and a few Adam steps after the import
give the losses the same steps give in PyTorch on the original module."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import zoo  # tests/importers/zoo.py (pytest puts this folder on the path)

import dlc

# the TorchScript exporter warns that it is legacy and that traces hold Python values
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::Warning")

# what each model's output is trained against: (number of classes, per position?)
TARGETS = {
    "encoder": (5, True),
    "gpt2": (zoo.VOCAB, True),
    "bert": (3, False),
    "lstm": (3, False),
    "gru": (3, False),
    "vit": (3, False),
}


def _session(imported, backend, source=None):
    model = imported.model if source is None else dlc.compile(source)
    sess = dlc.Session(model, backend=backend)
    sess.set_params(imported.weights)
    return sess


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_matches_pytorch_with_a_symbolic_batch_on_numpy(name, exported, torch):
    path, module, example = exported(name)
    imported = dlc.import_onnx(path, batch="B")
    assert "unk__" not in imported.source
    for k in example:
        assert imported.model.inputs[imported.inputs[k]][0] == "B"
    feeds = zoo.feeds(torch, example, 3, seed=1)
    with torch.no_grad():
        want = module(*feeds.values()).numpy()
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    got = _session(imported, "numpy").eval(imported.outputs["out"], data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "bert", "lstm", "vit", "cnn"])
def test_the_dynamo_exporter_matches_pytorch_too(name, exported, torch):
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript (dlc[onnx] has it)")
    path, module, example = exported(name, dynamo=True)
    imported = dlc.import_onnx(path, batch="B")
    assert "unk__" not in imported.source and "s0" not in str(imported.model.inputs)
    feeds = zoo.feeds(torch, example, 3, seed=5)
    with torch.no_grad():
        want = module(*feeds.values()).numpy()
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    got = _session(imported, "numpy").eval(imported.outputs["out"], data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.gl
@pytest.mark.parametrize("name", ["gpt2", "bert", "lstm"])
def test_matches_pytorch_on_gl(name, exported, torch, gl):
    path, module, example = exported(name)
    imported = dlc.import_onnx(path, batch="B")
    feeds = zoo.feeds(torch, example, 1, seed=2)
    with torch.no_grad():
        want = module(*feeds.values()).numpy()
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    got = _session(imported, "gl").eval(imported.outputs["out"], data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["gpt2", "lstm"])
def test_an_export_without_constant_folding_keeps_every_param_name(name, onnx, torch, tmp_path):
    # the TorchScript exporter's folding renames the weights it transposes; without it the
    # transposes (and LSTM's gate reordering) are in the model, and dlc writes them out
    path = tmp_path / f"{name}.onnx"
    module, example = zoo.export(torch, name, path, do_constant_folding=False)
    imported = dlc.import_onnx(path, batch="B")
    trainable = {line.split()[1].rstrip(":") for line in imported.source.splitlines() if line.startswith("param ")}
    assert trainable == {k for k, _ in module.named_parameters()}
    feeds = zoo.feeds(torch, example, 3, seed=6)
    with torch.no_grad():
        want = module(*feeds.values()).numpy()
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    got = _session(imported, "numpy").eval(imported.outputs["out"], data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_names_and_constants_survive_the_import(exported):
    path, module, _ = exported("gpt2")
    imported = dlc.import_onnx(path, batch="B")
    src = imported.source
    trainable = {line.split()[1].rstrip(":") for line in src.splitlines() if line.startswith("param ")}
    # the state_dict's names; GELU's exponent 3.0, the scale and the mask value are constants
    assert {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.1.c_attn.weight", "h.1.c_attn.bias"} <= trainable
    assert all(np.prod(imported.model.params[p]) > 1 for p in trainable)
    assert "= 3.0\n" in src
    # the causal-mask buffer is frozen: never trained, and it does not depend on the batch
    frozen = [line for line in src.splitlines() if line.startswith("frozen param")]
    assert frozen and all("B" not in line for line in frozen)


@pytest.mark.parametrize("name", sorted(TARGETS))  # (the CNN's batch norm trains otherwise in PyTorch)
def test_adam_steps_after_the_import_match_pytorch(name, exported, torch, tmp_path):
    path, module, example = exported(name)
    imported = dlc.import_onnx(path, batch="B")
    classes, per_position = TARGETS[name]
    feeds = zoo.feeds(torch, example, 4, seed=3)
    g = torch.Generator().manual_seed(4)
    targets = torch.randint(0, classes, (4, zoo.T) if per_position else (4,), generator=g)
    shape = f"[B, {zoo.T}]" if per_position else "[B]"
    source = imported.source + (
        f"input targets: i32{shape}\nloss cost = softmax_cross_entropy({imported.outputs['out']}, targets)\n"
    )
    sess = _session(imported, "numpy", source)
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    data["targets"] = targets.numpy()
    losses = sess.train(data, optimizer=dlc.Adam(1e-2), batch_size=4, steps=3, shuffle=False)

    module = copy.deepcopy(module).double().train()
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    want = []
    for _ in range(3):
        opt.zero_grad()
        out = module(*[v.double() if v.is_floating_point() else v for v in feeds.values()])
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, classes), targets.reshape(-1))
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=2e-4)


def _transformers_model(torch, name):
    tf = pytest.importorskip("transformers", reason="transformers is optional: pip install transformers")
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 6))
    if name == "gpt2":  # random init from a config: nothing downloads
        cfg = tf.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)
        model, inputs = tf.GPT2LMHeadModel(cfg), {"input_ids": ids}
    else:
        cfg = tf.BertConfig(
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=16,
        )
        mask = torch.ones(2, 6, dtype=torch.int64)
        inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        model = tf.BertForSequenceClassification(cfg)
    names = list(inputs)

    class Positional(torch.nn.Module):  # the exporters take positional inputs and one output
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *args):
            return self.m(**dict(zip(names, args)), return_dict=False)[0]

    return Positional().eval(), inputs


@pytest.mark.parametrize("name, dynamo", [("gpt2", True), ("bert", True), ("bert", False)])
def test_transformers_models_match_pytorch(name, dynamo, onnx, torch, tmp_path):
    if dynamo:
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript (dlc[onnx] has it)")
    module, inputs = _transformers_model(torch, name)
    path, names = tmp_path / f"{name}.onnx", list(inputs)
    if dynamo:
        batch = torch.export.Dim("B", min=1, max=64)
        dynamic = {"dynamic_shapes": (tuple({0: batch} for _ in names),)}
    else:  # (transformers' GPT-2 does not export this way: aten::diff)
        dynamic = {"dynamic_axes": {**{n: {0: "B"} for n in names}, "out": {0: "B"}}}
    args = (module, tuple(inputs.values()), str(path))
    torch.onnx.export(*args, dynamo=dynamo, input_names=names, output_names=["out"], **dynamic)
    imported = dlc.import_onnx(path, batch="B")
    assert "unk__" not in imported.source
    feeds = {k: torch.cat([v, v[:1]]) for k, v in inputs.items()}  # batch 3
    if "attention_mask" in feeds:
        feeds["attention_mask"][2, 4:] = 0  # a padded row
    with torch.no_grad():
        want = module(*feeds.values()).numpy()
    data = {imported.inputs[k]: v.numpy() for k, v in feeds.items()}
    got = _session(imported, "numpy").eval(imported.outputs["out"], data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_cli_import_names_the_i32_inputs(exported, tmp_path, dlc_cli):
    path, _, _ = exported("bert")
    r = dlc_cli("import", path, "-o", tmp_path / "bert.dl", "--batch", "B")
    assert r.returncode == 0, r.stderr
    assert "input attention_mask -> attention_mask: i32[B, 6]" in r.stdout
    assert "input attention_mask: i32[B, 6]" in (tmp_path / "bert.dl").read_text()
