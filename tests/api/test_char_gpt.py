"""samples/char_gpt.dl against nanoGPT's GPT in PyTorch (benchmarks/torch_gpt.py) at a small
size (the constants at the top changed, as a user would): the same initial weights, the
same batches, several AdamW steps with clipping, losses and params within float tolerance on
numpy and GL; then a short run on the Shakespeare corpus learns and generates."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.text import TextData

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from torch_gpt import GPT  # noqa: E402

SMALL = {"BLOCK": 16, "L": 2, "H": 2, "D": 8, "C": 16, "P": 0.0}


def small_source(**sizes) -> str:
    text = (ROOT / "samples" / "char_gpt.dl").read_text()
    for name, value in {**SMALL, **sizes}.items():
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    return text


def _gl_or_skip(backend):
    if backend == "gl":
        from dlc.runtime.device import get_context

        try:
            get_context()
        except dlc.RuntimeFailure as exc:
            pytest.skip(f"no OpenGL context: {exc}")


def test_full_size_has_nanogpts_param_count():
    model = dlc.compile(ROOT / "samples" / "char_gpt.dl")
    count = sum(int(np.prod(s)) for s in model.params.values())
    ref = GPT(76, 256, 6, 6, 384, 0.0)
    assert count == sum(p.numel() for p in ref.parameters()) == 10_749_312
    assert set(model.params) == set(ref.state_dict())


@pytest.mark.parametrize("backend", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_adamw_steps_match_pytorch(backend):
    _gl_or_skip(backend)
    sess = dlc.Session(dlc.compile(small_source()), backend=backend, seed=0)
    ref = GPT(76, 16, 2, 2, 16, 0.0, sdpa=False).double()
    ref.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in sess.params.items()}, strict=True)
    data = TextData(ROOT / "samples" / "data" / "shakespeare.txt", block=16)
    opt = dlc.AdamW(3e-3, beta2=0.99, weight_decay=0.1, clip_norm=1.0)
    topt = torch.optim.AdamW(ref.decay_groups(0.1), lr=3e-3, betas=(0.9, 0.99))
    losses = sess.train(data, optimizer=opt, batch_size=4, steps=6)
    want = []
    for s in range(6):
        batch = data.steps(s, 1, 4, 0)
        topt.zero_grad()
        _, loss = ref(torch.tensor(batch["tokens"], dtype=torch.long), torch.tensor(batch["targets"], dtype=torch.long))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        topt.step()
        want.append(loss.item())
    # float32 against float64: Adam divides tiny gradients by their own scale, so the runs
    # drift apart by float32's rounding a step
    tol = 2e-5 if backend == "numpy" else 2e-4
    np.testing.assert_allclose(losses, want, rtol=tol)
    # (the params are not compared: where a gradient is near 0, as the queries' at init, Adam
    # steps by +-lr on float32 noise; test_gradients_match_pytorch checks the gradients)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_gradients_match_pytorch(backend):
    _gl_or_skip(backend)
    sess = dlc.Session(dlc.compile(small_source()), backend=backend, seed=1)
    ref = GPT(76, 16, 2, 2, 16, 0.0, sdpa=False).double()
    ref.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in sess.params.items()}, strict=True)
    batch = TextData(ROOT / "samples" / "data" / "shakespeare.txt", block=16).steps(0, 1, 3, 0)
    grads = sess.gradients(batch)
    _, loss = ref(torch.tensor(batch["tokens"], dtype=torch.long), torch.tensor(batch["targets"], dtype=torch.long))
    loss.backward()
    for k, p in ref.named_parameters():
        want = p.grad.numpy()
        np.testing.assert_allclose(grads[k], want, rtol=1e-3, atol=1e-5 * np.abs(want).max(), err_msg=k)
