"""Generation's per-token path (issue 22): the vectorized sampler draws exactly the ids of the
id-order loop dlc.js runs, the context window fed is exactly the last `block` ids, and a GL
session allocates no buffer once the first token is drawn (one forward of the longest
context sized them all)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import dlc
from dlc import generate as gen
from dlc.runtime import readback as readback_module
from dlc.runtime.executor import Executor

ROOT = pathlib.Path(__file__).resolve().parents[1]


def loop_sample(logits, temperature, top_k, u) -> int:
    """The sampler as dlc.js writes it (and dlc/generate.py did): a full sort for the k-th
    largest, then a running float64 sum in id order."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))
    logits = logits / temperature
    if top_k is not None and top_k < logits.size:
        kth = np.sort(logits)[-top_k]
        logits = np.where(logits < kth, -np.inf, logits)
    p = np.exp(logits - logits.max())
    total = 0.0
    target = u * p.sum()
    for i, q in enumerate(p):
        total += q
        if total > target:
            return i
    return int(np.flatnonzero(p)[-1])


def _rows(rng):
    for size in (1, 2, 7, 76, 1000):
        yield rng.normal(0, 3, size).astype(np.float32)
        yield np.round(rng.normal(0, 1, size), 1).astype(np.float32)  # many ties
        row = rng.normal(0, 1, size).astype(np.float32)
        row[rng.integers(0, size, max(1, size // 3))] = -np.inf  # masked entries
        yield row
    yield np.zeros(50, np.float32)
    yield np.array([-np.inf, 0.0, -np.inf], np.float32)


def test_the_sampler_draws_the_loops_ids_to_the_bit():
    rng = np.random.default_rng(0)
    us = [0.0, 1e-9, 0.25, 0.5, 0.999999, 1 - 2**-24]
    checked = 0
    for row in _rows(rng):
        for temperature in (0, 0.3, 0.8, 1.0, 2.5):
            for top_k in (None, 1, 3, 40, 5000):
                for u in [*us, *rng.random(3)]:
                    with np.errstate(invalid="ignore"):  # a row of -inf alone: NaNs, the same in both
                        got = gen.sample(row, temperature, top_k, float(u))
                        want = loop_sample(row, temperature, top_k, float(u))
                    assert got == want, (row, temperature, top_k, u)
                    checked += 1
    assert checked > 2000


@pytest.mark.parametrize("prompt_len,block", [(1, 5), (3, 5), (5, 5), (9, 5), (2, 1)])
def test_the_window_fed_is_the_last_block_ids(prompt_len, block):
    prompt = list(range(100, 100 + prompt_len))
    fed = []

    def run(context):
        assert context.dtype == np.int32 and context.shape[0] == 1 and context.flags.c_contiguous
        fed.append(context[0].tolist())
        logits = np.zeros((1, context.shape[1], 7), np.float32)
        logits[0, -1, int(context.sum()) % 7] = 5.0  # the next id depends on the whole window
        return logits

    out = list(gen.generate(run, prompt, 12, block, temperature=0.5, top_k=2, seed=3))
    ids = list(prompt)
    for step, nxt in enumerate(out):  # the list the old loop sliced, step by step
        assert fed[step] == ids[-block:]
        ids.append(nxt)
    assert len(out) == 12


def _tiny_gpt(block: int) -> str:
    text = (ROOT / "samples/char_gpt.dl").read_text()
    for name, value in (("BLOCK", block), ("L", 1), ("H", 2), ("D", 4), ("C", 8)):
        text = re.sub(rf"^const {name} = \d+", f"const {name} = {value}", text, flags=re.M)
    return text


def test_generation_on_gl_allocates_nothing_after_the_first_token(tmp_path, monkeypatch):
    try:
        sess = dlc.Session(dlc.compile(_tiny_gpt(16)), backend="gl", seed=0)
    except dlc.RuntimeFailure as exc:
        pytest.skip(str(exc))
    counts = {"buffers": 0, "readbacks": 0}
    allocate, make = Executor._allocate, readback_module.Readback.make.__func__

    def counting_allocate(self, nbytes, slot):
        counts["buffers"] += 1
        return allocate(self, nbytes, slot)

    def counting_make(cls, device, floats):
        counts["readbacks"] += 1
        return make(cls, device, floats)

    monkeypatch.setattr(Executor, "_allocate", counting_allocate)
    monkeypatch.setattr(readback_module.Readback, "make", classmethod(counting_make))
    seen = []

    def on_token(_):
        seen.append(dict(counts))

    ids = sess.generate([1, 2], 30, block=16, temperature=0.9, top_k=5, seed=7, on_token=on_token)
    assert seen[0]["buffers"] > 0  # the first token's forward of the longest context sized them
    assert seen[-1] == seen[0]  # the context grew from 2 to 16 and nothing more was made
    reference = dlc.Session(dlc.compile(_tiny_gpt(16)), backend="numpy", seed=0)
    assert ids == reference.generate([1, 2], 30, block=16, temperature=0.9, top_k=5, seed=7)
