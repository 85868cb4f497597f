"""The storage plan of a GPT training step (samples/char_gpt.dl, small configurations) stays
under a bound worked out from its tensors: params, gradients and AdamW's two moments (4 floats
a param), the activations the backward needs (per layer and token: the residual stream, q, k
and v, the attention's output with its row statistics, the MLP's pre-activation), and the
working set of one layer's backward. Dropout masks, layer_norm outputs, gelu and the
attention output's views are recomputed in the backward (compiler/fusion.py,
compiler/remat.py), so they count for nothing here; keeping any of them breaks the bound."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import dlc
from dlc.compiler.fusion import fuse
from dlc.compiler.plan import plan
from dlc.compiler.train_graph import build_train_graph

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "char_gpt.dl"
V = 76  # the sample's vocabulary


def gpt_source(**consts) -> str:
    text = SAMPLE.read_text()
    for name, value in consts.items():
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    return text


@pytest.mark.parametrize(
    "L, H, D, T, B",
    [
        (2, 2, 16, 32, 8),
        (3, 4, 8, 16, 16),
        (6, 6, 64, 256, 64),  # nanoGPT's shakespeare_char (benchmarks/bench_gpt.py): planned on the host
    ],
)
def test_gpt_training_step_plan_is_within_its_closed_form(L, H, D, T, B):
    C = H * D
    model = dlc.compile(gpt_source(BLOCK=T, L=L, H=H, D=D, C=C))
    step = build_train_graph(model.graph, None, dlc.AdamW(1e-3, weight_decay=0.1, clip_norm=1.0))
    p = plan(fuse(step, [step.names[step.losses[0]]], step.updates), {"B": B, "T": T})
    peak = p.peak_bytes()

    # the model's params: token and position embeddings, ln_f, and per layer c_attn, c_proj,
    # the MLP's two matrices and two layer norms
    params = V * C + T * C + C + L * (3 * C * C + C * C + 2 * 4 * C * C + 2 * C)
    assert sum(math.prod(step.node(n).shape) for n in step.params) == params
    assert peak["param"] == 4 * params
    assert peak["state"] <= 4 * (2 * params + 8)  # two moments, and a few scalars ($t, $step, $seed)

    tokens = B * T
    # per layer and token: q, k, v (3C), the attention's output and statistics (C + H), the
    # residual after the attention (C) and the MLP's pre-activation (4C); and the residual
    # stream between layers (L + 1 tensors of C)
    kept = tokens * (L * (3 * C + C + H + C + 4 * C) + (L + 1) * C)
    # one layer's backward at a time: three [B, T, 4C] tensors and two of the logits' size
    working = tokens * (3 * 4 * C + 2 * V)
    grads = params
    bound = 4 * (grads + kept + working)
    assert peak["planned"] <= bound, (peak["planned"], bound)
    assert peak["planned"] + peak["param"] + peak["state"] <= 4 * (4 * params + kept + working) + 4 * 8
