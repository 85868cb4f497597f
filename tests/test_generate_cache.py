"""Generation's key/value cache (compiler/decode.py, ops/kv_cache.py, dlc/generate.py): the
decode step's logits are the full forward's (the NumPy reference in float64), a model that
mixes positions along T is refused with the reason, and cached and uncached generation draw
the same ids, past the block too."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import dlc
from dlc import generate as gen
from dlc.compiler import compile_cache, registry
from dlc.compiler.decode import POS, NotIncremental, decode_graph
from dlc.compiler.fusion import fuse
from dlc.compiler.plan import plan
from dlc.compiler.reference import evaluate
from dlc.compiler.verify import check_graph

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny_gpt(block: int = 16, layers: int = 2) -> str:
    text = (ROOT / "samples/char_gpt.dl").read_text()
    for name, value in (("BLOCK", block), ("L", layers), ("H", 2), ("D", 4), ("C", 8), ("V", 11)):
        text = re.sub(rf"^const {name} = \d+", f"const {name} = {value}", text, flags=re.M)
    return text


def random_leaves(graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Params large enough that attention's weights are far from uniform."""
    rng = np.random.default_rng(seed)
    return {p: rng.normal(0, 0.6, graph.node(p).shape) for p in graph.params}


def full_logits(graph, leaves, ids) -> np.ndarray:
    root = graph.names["logits"]
    feeds = {**leaves, "tokens": np.asarray([ids], np.int32)}
    return evaluate(graph, [root], feeds, {"B": 1, "T": len(ids)}, dtype=np.float64)[root][0]


def with_constants(decoder, leaves) -> dict[str, np.ndarray]:
    """The leaves and the weights the decode steps read transposed."""
    c = decoder.constants
    values = evaluate(c, [i for _, i in c.updates], leaves, {}, dtype=np.float64)
    return {**leaves, **{name: values[i] for name, i in c.updates}}


def decode_steps(decoder, leaves, ids, chunks) -> list[np.ndarray]:
    """The decode step fed `ids` in chunks of the given sizes; the last logits of each."""
    g = decoder.step.graph
    leaves = with_constants(decoder, leaves)
    state = {name: np.zeros([1 if isinstance(d, str) else d for d in shape]) for name, shape in decoder.caches}
    targets = [i for _, i in g.updates]
    out, pos = [], 0
    for n in chunks:
        new = np.asarray([ids[pos : pos + n]], np.int32)
        feeds = {**leaves, **state, "tokens": new, POS: np.array([pos], np.int32)}
        values = evaluate(g, [decoder.step.logits, *targets], feeds, {"B": 1, "T": n}, dtype=np.float64)
        state = {name: values[i] for name, i in g.updates}
        out.append(values[decoder.step.logits][0])
        pos += n
    return out


def test_decode_logits_are_the_full_forwards():
    model = dlc.compile(tiny_gpt())
    graph = dlc.Session(model, backend="numpy", seed=0)._eval_program()
    decoder = decode_graph(graph, 16)
    for made in (decoder.step.graph, decoder.window.graph, decoder.constants):
        check_graph(made)  # the IR checker's rules: each node's shape is its op's rule's
    assert len(decoder.caches) == 2  # a cache of keys and values per layer
    assert len(decoder.hoisted) == 9  # the weights read as W^T: 4 a layer and the head's
    leaves = random_leaves(graph)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 11, 16).tolist()
    full = full_logits(graph, leaves, ids)
    assert np.std(full) > 0.1  # not a model whose logits ignore the context
    chunks = [5, 1, 1, 3, 1, 5]  # a prefill, single steps, a chunk, up to the block
    ends = np.cumsum(chunks) - 1
    got = decode_steps(decoder, leaves, ids, chunks)
    for end, logits in zip(ends, got):
        # position `end` of a forward over the first end + 1 ids (causal: the same as of all 16)
        np.testing.assert_allclose(logits, full[end], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(logits, full_logits(graph, leaves, ids[: end + 1])[-1], rtol=1e-12, atol=1e-12)
    window = decoder.window  # a whole window from position 0, with no cache
    feeds = {**with_constants(decoder, leaves), "tokens": np.asarray([ids], np.int32)}
    got = evaluate(window.graph, [window.logits], feeds, {"B": 1, "T": 16}, dtype=np.float64)[window.logits]
    np.testing.assert_allclose(got[0], full[-1], rtol=1e-12, atol=1e-12)


REFUSED = {
    "a sum over T": ("logits = x + sum(x, axis=1, keepdims=true)", "reduces over T"),
    "a mean over T": ("logits = x - mean(x, axis=1, keepdims=true)", "reduces over T"),
    "attention that is not causal": (
        "q = reshape(x, [B, 1, T, 11])\nlogits = reshape(softmax(q @ transpose(q, [0, 1, 3, 2])) @ q, [B, T, 11])",
        "is not causal",
    ),
    "a second input": ("input bias: [B, T, 11]\nlogits = x + bias", "input 'bias'"),
    "random numbers": ("logits = x + random_normal([T, 11])", "draws by element"),
}


SOURCE = "input tokens: i32[B, T]\nparam emb: [11, 11] = normal(0, 1)\nx = gather(emb, tokens)\n{body}\n"
REFUSED_SOURCE = SOURCE.format(body=REFUSED["a sum over T"][0])


def test_position_wise_ops_pass_and_compute_the_full_forwards_last_row():
    body = "logits = x * reshape(float(argmax(x, axis=-1)), [B, T, 1]) + sum(x * x, axis=-1, keepdims=true)"
    body += " + one_hot(tokens, 11)"
    graph = dlc.Session(dlc.compile(SOURCE.format(body=body)), backend="numpy", seed=0)._eval_program()
    decoder = decode_graph(graph, 8)
    assert decoder.caches == ()  # no attention: nothing to cache, each position alone
    leaves = random_leaves(graph)
    ids = [3, 1, 4, 1, 5, 9]
    got = decode_steps(decoder, leaves, ids, [4, 1, 1])
    for end, logits in zip((3, 4, 5), got):
        np.testing.assert_allclose(logits, full_logits(graph, leaves, ids)[end], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_model_that_mixes_positions_is_refused_and_generates_as_before(case):
    body, reason = REFUSED[case]
    model = dlc.compile(SOURCE.format(body=body))
    sess = dlc.Session(model, backend="numpy", seed=0)
    with pytest.raises(NotIncremental, match=reason):
        decode_graph(sess._eval_program(), 8)
    cache, why = gen.KVCache.of(sess, 8)
    assert cache is None and reason in why
    if case != "a second input":  # generation feeds tokens alone: that model cannot generate
        ids = sess.generate([1, 2], 12, block=8, temperature=0.9, seed=5)
        assert ids == sess.generate([1, 2], 12, block=8, temperature=0.9, seed=5, cache=False)


def test_cached_generation_draws_the_uncached_ids_past_the_block():
    sess = dlc.Session(dlc.compile(tiny_gpt()), backend="numpy", seed=0)
    for name, value in random_leaves(sess._eval_program(), 3).items():
        sess.backend.set_leaf(name, value)
    assert gen.KVCache.of(sess, 16)[0] is not None
    for prompt in ([4], [1, 2, 3], list(range(11)) * 2):  # one id, a few, more than the block
        kw = dict(block=16, temperature=0.8, top_k=6, seed=11)
        cached = sess.generate(prompt, 40, **kw)
        assert cached == sess.generate(prompt, 40, cache=False, **kw)
        assert len(set(cached)) > 3  # a varied text, not one id repeated
    assert not any(name.startswith("$kv") for name in sess.backend.leaves)  # caches and W^T freed


def test_the_cache_feeds_the_new_ids_and_prefills_past_the_block():
    fed = []

    class Recorder:
        def __call__(self, ids, pos):
            fed.append((pos, ids[0].tolist()))
            logits = np.zeros(7, np.float32)
            logits[int(ids.sum() + pos) % 7] = 5.0
            return logits

    out = list(gen.generate(None, [5, 6], 8, 4, temperature=0.5, seed=3, cache=Recorder()))
    ids = [5, 6, *out]
    assert fed[0] == (0, [5, 6])  # the prompt in one call
    assert fed[1] == (2, [ids[2]]) and fed[2] == (3, [ids[3]])  # then one id at its position
    for step in range(3, 8):  # the window is full: a prefill of the last 4 ids each step
        assert fed[step] == (0, ids[step - 2 : step + 2])


def _dlc(*args):
    return subprocess.run([sys.executable, "-m", "dlc", *args], capture_output=True, text=True, timeout=300)


def test_dlc_generate_says_why_there_is_no_cache_and_no_cache_gives_the_same_text(tmp_path):
    vocab = dlc.text.Vocab("abcdefghijk", block=8)
    runs = {}
    for name, source in (("gpt", tiny_gpt(8)), ("pooled", REFUSED_SOURCE)):
        model = tmp_path / f"{name}.dl"
        model.write_text(source)
        sess = dlc.Session(dlc.compile(source), backend="numpy", seed=0)
        for leaf, value in random_leaves(sess._eval_program(), 4).items():
            sess.backend.set_leaf(leaf, value)
        sess.save(tmp_path / f"{name}.npz")
        vocab.save(tmp_path / f"{name}.vocab.json")
        args = [str(model), "--weights", str(tmp_path / f"{name}.npz"), "--prompt", "abc", "--tokens", "20",
                "--seed", "3", "--backend", "numpy"]  # fmt: skip
        runs[name] = [_dlc("generate", *args, *flag) for flag in ([], ["--no-cache"])]
    for cached, plain in runs.values():
        assert cached.returncode == 0 and plain.returncode == 0, cached.stderr + plain.stderr
        assert cached.stdout == plain.stdout and len(cached.stdout.strip()) == 23
    assert "no KV cache" not in runs["gpt"][0].stderr
    assert "no KV cache: sum (line 4) reduces over T" in runs["pooled"][0].stderr
    assert "no KV cache" not in runs["pooled"][1].stderr


def test_the_decode_steps_read_back_from_the_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DLC_COMPILE_CACHE", "1")
    for source in (tiny_gpt(), REFUSED_SOURCE):
        graph = dlc.Session(dlc.compile(source), backend="numpy", seed=0)._eval_program()
        made = compile_cache.decode_form(graph, 16)  # built, and stored
        again = compile_cache.decode_form(graph, 16)  # read back
        assert again == made and (made[0] is None) == (source == REFUSED_SOURCE)
        if made[0] is not None:
            assert again[0] is not made[0] and again[0].step.graph.__dict__["dtypes"] == made[0].step.graph.dtypes
    for entry in (tmp_path / "cache").rglob("*"):
        if entry.is_file():
            entry.write_bytes(b"not an entry")  # untrusted: a miss, built again
    assert compile_cache.decode_form(graph, 16) == made


@pytest.mark.parametrize("n,pos", [(1, 0), (1, 9), (4, 0), (3, 5)])
def test_attention_cached_is_torchs_attention_over_the_cached_rows(n, pos):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(n * 10 + pos)
    q, kv = rng.normal(size=(2, 3, n, 8)), rng.normal(size=(2, 2, 3, 12, 8))
    kv[:, :, :, pos + n :] = np.nan  # rows past the new ones: never read
    got = registry.get("attention_cached").ref([q, kv, np.array([pos], np.int32)], {"scale": 0.4}, {})
    seen = torch.arange(pos + n)[None, :] <= (pos + torch.arange(n))[:, None]
    k, v = (torch.from_numpy(kv[i, :, :, : pos + n]) for i in (0, 1))
    want = torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), k, v, attn_mask=seen, scale=0.4)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    rows_first = {"scale": 0.4, "rows_first": True}
    got = registry.get("attention_cached").ref([q, kv, np.array([pos], np.int32)], rows_first, {})
    np.testing.assert_allclose(got, want.numpy().transpose(0, 2, 1, 3), rtol=1e-12, atol=1e-12)


def test_the_steps_write_the_caches_in_place_and_transpose_no_weight():
    graph = dlc.Session(dlc.compile(tiny_gpt()), backend="numpy", seed=0)._eval_program()
    decoder = decode_graph(graph, 16)
    step = plan(fuse(decoder.step.graph, [decoder.step.logits], decoder.step.graph.updates), {"B": 1, "T": 1})
    assert {name for name, _ in step.inplace} == {name for name, _ in decoder.caches} and step.copies == ()
    for made in (decoder.step, decoder.window):
        assert not any(n.op == "transpose" and made.graph.nodes[n.inputs[0]].op == "param" for n in made.graph.nodes)
    whole = fuse(graph, [graph.names["logits"]]).kernels
    assert len(fuse(decoder.step.graph, [decoder.step.logits], decoder.step.graph.updates).kernels) < len(whole)
