"""Tiny PyTorch models of the shapes people export today (test_zoo.py): an encoder with
embeddings (nn.TransformerEncoder), GPT-2 and BERT written as transformers writes them
(random init, no download), LSTM and GRU classifiers. Each `make(torch)` returns
(module, example inputs as {name: tensor}, the dims of each input that are dynamic)."""

from __future__ import annotations

import math

VOCAB, C, HEADS, T = 40, 32, 4, 6


def encoder(torch):
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, C)
            layer = nn.TransformerEncoderLayer(C, HEADS, 2 * C, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(C, 5)

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids)))

    return Encoder, {"ids": torch.randint(0, VOCAB, (2, T))}


def _gelu_new(torch, x):  # GPT-2's "gelu_new", as transformers writes it
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gpt2(torch):
    nn = torch.nn

    class Conv1D(nn.Module):  # transformers' GPT-2 linear: weight [in, out], addmm
        def __init__(self, nf, nx):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
            self.bias = nn.Parameter(torch.randn(nf) * 0.02)

        def forward(self, x):
            size = x.size()[:-1] + (self.weight.size(-1),)
            return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.c_proj = Conv1D(3 * C, C), Conv1D(C, C)
            self.c_fc, self.mlp_proj = Conv1D(4 * C, C), Conv1D(C, 4 * C)
            self.register_buffer("bias", torch.tril(torch.ones(16, 16, dtype=torch.bool)).view(1, 1, 16, 16))

        def heads(self, x):
            return x.view(x.size()[:-1] + (HEADS, C // HEADS)).permute(0, 2, 1, 3)

        def forward(self, x):
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = self.heads(q), self.heads(k), self.heads(v)
            w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=v.dtype)
            n = q.size(-2)
            mask = self.bias[:, :, :n, :n]
            w = torch.where(mask, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
            a = torch.matmul(nn.functional.softmax(w, dim=-1), v).permute(0, 2, 1, 3)
            x = x + self.c_proj(a.reshape(a.size()[:-2] + (C,)))
            return x + self.mlp_proj(_gelu_new(torch, self.c_fc(self.ln_2(x))))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, C), nn.Embedding(16, C)
            self.h = nn.ModuleList([Block(), Block()])
            self.ln_f = nn.LayerNorm(C)
            self.lm_head = nn.Linear(C, VOCAB, bias=False)

        def forward(self, input_ids):
            pos = torch.arange(input_ids.size(-1)).unsqueeze(0)
            x = self.wte(input_ids) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT2, {"input_ids": torch.randint(0, VOCAB, (2, T))}


def bert(torch):
    nn = torch.nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
            self.dense, self.ln1 = nn.Linear(C, C), nn.LayerNorm(C, eps=1e-12)
            self.intermediate, self.output, self.ln2 = nn.Linear(C, 2 * C), nn.Linear(2 * C, C), nn.LayerNorm(C)

        def heads(self, x):
            return x.view(x.size()[:-1] + (HEADS, C // HEADS)).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(C // HEADS) + mask
            a = torch.matmul(nn.functional.softmax(s, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            x = self.ln1(self.dense(a.view(a.size()[:-2] + (C,))) + x)
            return self.ln2(self.output(nn.functional.gelu(self.intermediate(x))) + x)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings, self.position_embeddings = nn.Embedding(VOCAB, C), nn.Embedding(16, C)
            self.token_type_embeddings, self.ln = nn.Embedding(2, C), nn.LayerNorm(C, eps=1e-12)
            self.register_buffer("position_ids", torch.arange(16).expand((1, -1)), persistent=False)
            self.layers = nn.ModuleList([Layer(), Layer()])
            self.pooler, self.classifier = nn.Linear(C, C), nn.Linear(C, 3)

        def forward(self, input_ids, token_type_ids, attention_mask):
            pos = self.position_ids[:, : input_ids.size(1)]
            x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
            x = self.ln(x + self.position_embeddings(pos))
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            for layer in self.layers:
                x = layer(x, mask)
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))

    ids = torch.randint(0, VOCAB, (2, T))
    types = torch.randint(0, 2, (2, T))
    mask = torch.ones(2, T, dtype=torch.int64)
    mask[1, T - 2 :] = 0
    return Bert, {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def lstm(torch):
    nn = torch.nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(5, 8, batch_first=True)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])

    return Classifier, {"x": torch.randn(2, T, 5)}


def gru(torch):
    nn = torch.nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(5, 8, batch_first=True)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            out, _ = self.rnn(x)
            return self.head(out[:, -1])

    return Classifier, {"x": torch.randn(2, T, 5)}


def vit(torch):
    nn = torch.nn

    class ViT(nn.Module):  # the cls token's expand(B, -1, -1) must follow the batch
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, C, 4, stride=4)
            self.cls_token = nn.Parameter(torch.randn(1, 1, C))
            self.pos = nn.Parameter(torch.randn(1, 5, C) * 0.1)
            layer = nn.TransformerEncoderLayer(C, HEADS, 2 * C, dropout=0.0, batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
            self.head = nn.Linear(C, 3)

        def forward(self, x):
            p = self.patch(x).flatten(2).transpose(1, 2)
            h = torch.cat([self.cls_token.expand(p.shape[0], -1, -1), p], dim=1) + self.pos
            return self.head(self.enc(h)[:, 0])

    return ViT, {"x": torch.randn(2, 3, 8, 8)}


def cnn(torch):
    nn = torch.nn

    class ResidualNet(nn.Module):  # resnet/mobilenet's shapes: conv, batch norm, relu6, a skip, pool, flatten
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 3)
            with torch.no_grad():
                for bn in (self.bn1, self.bn2):
                    bn.running_mean.uniform_(-0.5, 0.5)
                    bn.running_var.uniform_(0.5, 2.0)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = h + nn.functional.relu6(self.bn2(self.conv2(h)))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))

    return ResidualNet, {"x": torch.randn(2, 3, 8, 8)}


MODELS = {"encoder": encoder, "gpt2": gpt2, "bert": bert, "lstm": lstm, "gru": gru, "vit": vit, "cnn": cnn}


def feeds(torch, example, batch: int, seed: int) -> dict:
    """Inputs of another batch size than the export's (the ids in range, a padded row)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in example.items():
        shape = (batch, *v.shape[1:])
        if v.dtype == torch.int64:
            high = {"input_ids": VOCAB, "ids": VOCAB, "token_type_ids": 2, "attention_mask": 2}[k]
            out[k] = torch.randint(0, high, shape, generator=g)
        else:
            out[k] = torch.randn(shape, generator=g)
    if "attention_mask" in out:
        out["attention_mask"][:, 0] = 1
    return out


def export(torch, name: str, path, dynamo: bool = False, **options) -> tuple:
    """(module in eval mode, example inputs): the model exported to `path` by
    torch.onnx.export with a dynamic batch dim named B, by the TorchScript exporter or
    (dynamo=True, which needs onnxscript) torch.export's."""
    torch.manual_seed(0)
    cls, inputs = MODELS[name](torch)
    module = cls().eval()
    export_module(torch, module, inputs, path, dynamo, **options)
    return module, inputs


def export_module(torch, module, inputs: dict, path, dynamo: bool = False, **options) -> None:
    """torch.onnx.export of `module` on `inputs` (name -> example) with a dynamic batch dim
    named B and one output `out`."""
    names = list(inputs)
    if dynamo:
        batch = torch.export.Dim("B", min=1, max=64)
        dynamic = {"dynamic_shapes": {n: {0: batch} for n in names}}
    else:
        dynamic = {"dynamic_axes": {**{n: {0: "B"} for n in names}, "out": {0: "B"}}}
    args = (module, tuple(inputs.values()), str(path))
    torch.onnx.export(*args, dynamo=dynamo, input_names=names, output_names=["out"], **dynamic, **options)


VISION = ("mobilenet_v2", "resnet18")  # torchvision's, random weights (nothing downloads)


def vision(torch, torchvision, name: str):
    """(torchvision's `name` with 10 classes in eval mode, {"x": a 32x32 batch of 2}): random
    init, batch norm statistics that are not the identity (so that folding them shows)."""
    torch.manual_seed(0)
    module = getattr(torchvision.models, name)(weights=None, num_classes=10)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return module.eval(), {"x": torch.randn(2, 3, 32, 32)}
