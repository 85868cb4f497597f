"""Blocked matmul shapes beyond the defaults (K-groups inside a work group, swizzled fetch,
uneven tiles) at awkward sizes, with a fused epilogue, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.reference import evaluate

pytestmark = pytest.mark.gl

BLOCKINGS = [
    (64, 64, 32, 8, 8, 4),  # 4 K-groups of 64 invocations
    (64, 64, 16, 4, 4, 2),  # 2 K-groups of 256
    (128, 64, 32, 8, 4, 2),  # the "split" default
    (128, 64, 16, 8, 4),  # uneven tile
    (64, 64, 16, 4, 4, 1, False),  # unswizzled fetch
    (16, 16, 64, 4, 4, 16),  # thin tiles, 16 K-groups
]


def _graph(a_shape, b_shape, ta, tb):
    b = GraphBuilder()
    a, w = b.input("a", a_shape), b.input("w", b_shape)
    y = b.add("matmul", [a, w], ta=ta, tb=tb)
    bias = b.input("bias", (b.shape(y)[-1],))
    y = b.add("relu", [b.add("add", [y, bias])])
    return b.build(), y


@pytest.mark.parametrize("blocking", BLOCKINGS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_blockings_at_awkward_sizes(gl, blocking, ta, tb):
    from dlc.backends.gl import GLBackend

    rng = np.random.default_rng(0)
    m, k, n = 131, 75, 67  # no multiple of any tile; K ends inside a slab and a K-group
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    g, y = _graph(a_shape, b_shape, ta, tb)
    feeds = {
        "a": rng.normal(size=a_shape).astype(np.float32),
        "w": rng.normal(size=b_shape).astype(np.float32),
        "bias": rng.normal(size=n).astype(np.float32),
    }
    backend = GLBackend({"blocking": blocking})
    (got,) = backend.run(g, [y], feeds, {})
    want = evaluate(g, [y], feeds, {})[y]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    backend.close()


@pytest.mark.parametrize("ta", [False, True])
def test_thin_output_over_a_long_k_takes_k_groups(gl, ta):
    from dlc.backends.gl import GLBackend
    from dlc.compiler.pipeline import compile_program

    rng = np.random.default_rng(1)
    m, k, n = 100, 300, 10  # a thin output, K past THIN_MIN_K and not a multiple of the slab
    a_shape = (k, m) if ta else (m, k)
    g, y = _graph(a_shape, (k, n), ta, False)
    source = compile_program(g, [y]).kernels[0].source
    assert "16 K-groups" in source.split("\n")[1]
    feeds = {
        "a": rng.normal(size=a_shape).astype(np.float32),
        "w": rng.normal(size=(k, n)).astype(np.float32),
        "bias": rng.normal(size=n).astype(np.float32),
    }
    backend = GLBackend()
    (got,) = backend.run(g, [y], feeds, {})
    want = evaluate(g, [y], feeds, {})[y]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    backend.close()


def test_session_memory_counts_the_split_k_scratch(gl):
    """A product split across work groups (K of 4096 in few tiles) adds its partial sums in a
    scratch buffer: Session.memory()'s "slots" count it (peak memory is not understated)."""
    import dlc

    s = dlc.Session(dlc.compile("input x: [64, 4096]\nparam w: [4096, 8] = normal(0, 1)\ny = x @ w\n"), backend="gl")
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    np.testing.assert_allclose(s.eval("y", {"x": x}), x @ s.params["w"], rtol=1e-4, atol=1e-3)
    (executor,) = [ex for _, _, ex in s.backend._programs.values()]
    assert executor.scratch, "the product was not split across work groups"
    scratch = sum(b.capacity for b in executor.scratch.values())
    slots = sum(b.capacity for b in executor.buffers.values() if b.handle)
    assert s.memory()["slots"][1] == slots + scratch
