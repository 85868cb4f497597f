"""Generation's key/value cache on GL (both targets): the caches stay on the GPU between
steps, each step's logits are the NumPy reference's full forward, and cached generation
draws the ids of uncached generation and of the NumPy session, past the block too."""

from __future__ import annotations

import numpy as np
import pytest
from test_generate_cache import full_logits, random_leaves, tiny_gpt

import dlc
from dlc import generate as gen

pytestmark = pytest.mark.gl


def sessions(target: str, block: int = 16):
    model = dlc.compile(tiny_gpt(block))
    try:
        sess = dlc.Session(model, backend="gl", seed=0, target=target)
    except dlc.RuntimeFailure as exc:
        pytest.skip(str(exc))
    ref = dlc.Session(model, backend="numpy", seed=0)
    for name, value in random_leaves(ref._eval_program(), 3).items():
        sess.backend.set_leaf(name, value.astype(np.float32))
        ref.backend.set_leaf(name, value)
    return sess, ref


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_each_steps_logits_are_the_full_forwards(target):
    sess, ref = sessions(target)
    cache, why = gen.KVCache.of(sess, 16)
    assert cache is not None, why
    graph = ref._eval_program()
    leaves = {p: ref.backend.get_leaf(p).astype(np.float64) for p in graph.params}
    ids = np.random.default_rng(2).integers(0, 11, 16).astype(np.int32)
    full = full_logits(graph, leaves, ids.tolist())
    cache.start(9, 16)
    pos = 0
    for n in (9, 1, 1, 5):  # a prefill, two steps, a chunk that fills the block
        got = cache(ids[None, pos : pos + n], pos)
        pos += n
        np.testing.assert_allclose(got, full[pos - 1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cache(ids[None], 0), full[-1], rtol=1e-4, atol=1e-4)  # the window step
    cache.close()


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_cached_generation_draws_the_uncached_and_numpy_ids(target):
    sess, ref = sessions(target)
    kw = dict(block=16, temperature=0.8, top_k=6, seed=11)
    cached = sess.generate([1, 2, 3], 40, **kw)  # 40 past a block of 16: prefills of the window
    assert cached == sess.generate([1, 2, 3], 40, cache=False, **kw)
    assert cached == ref.generate([1, 2, 3], 40, **kw)
