"""nanoGPT's GPT (Karpathy, model.py) in plain PyTorch, without biases: the oracle that
samples/char_gpt.dl is tested against (tests/api/test_char_gpt.py) and the baseline of
benchmarks/bench_gpt.py. Its state_dict keys are the .dl model's param names (the head is
tied to `transformer.wte.weight`, so it has no key of its own)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c: int, heads: int, dropout: float, sdpa: bool):
        super().__init__()
        self.c_attn = nn.Linear(c, 3 * c, bias=False)
        self.c_proj = nn.Linear(c, c, bias=False)
        self.heads, self.sdpa = heads, sdpa
        self.attn_dropout = nn.Dropout(dropout)  # on the probabilities, as nanoGPT and samples/char_gpt.dl
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
            att = self.attn_dropout(F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1))
            y = att @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class MLP(nn.Module):
    def __init__(self, c: int, dropout: float):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c, bias=False)
        self.c_proj = nn.Linear(4 * c, c, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c: int, heads: int, dropout: float, sdpa: bool):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, bias=False)
        self.attn = CausalSelfAttention(c, heads, dropout, sdpa)
        self.ln_2 = nn.LayerNorm(c, bias=False)
        self.mlp = MLP(c, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, heads: int, c: int, dropout: float, sdpa: bool = True):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab, c),
                wpe=nn.Embedding(block, c),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block(c, heads, dropout, sdpa) for _ in range(layers)]),
                ln_f=nn.LayerNorm(c, bias=False),
            )
        )
        # nanoGPT's init (as samples/char_gpt.dl declares it): N(0, 0.02), the residual
        # projections N(0, 0.02 / sqrt(2 layers))
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, tokens, targets=None):
        t = tokens.shape[1]
        pos = torch.arange(t, device=tokens.device)
        x = self.transformer.drop(self.transformer.wte(tokens) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.transformer.ln_f(x) @ self.transformer.wte.weight.T
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def decay_groups(self, weight_decay: float):
        """nanoGPT's configure_optimizers rule (and dlc's AdamW): params of rank >= 2 decay."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
