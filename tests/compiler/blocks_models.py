"""One model written with def + for and written out flat (tests/compiler/test_blocks.py and
tests/gl/test_blocks_gl.py compare them)."""

from __future__ import annotations

import numpy as np

BLOCKS = """
input x: [B, 4]
input y: [B, 4]
const C = 4

def mlp(x, n) {
    param fc.weight: [n, n] = normal(0, 0.5)
    param fc.bias: [n] = uniform(-0.1, 0.1)
    return tanh(x @ fc.weight + fc.bias)
}

def block(x, n) {
    param ln.scale: [n] = normal(1, 0.1)
    h = x * ln.scale
    x = x + mlp(h, n) as mlp
    return x
}

h = x
for i in range(2) {
    h = block(h, C) as h.{i}
}
loss cost = mean_squared(h, y)
"""

FLAT = """
input x: [B, 4]
input y: [B, 4]
const C = 4

param h.0.ln.scale: [4] = normal(1, 0.1)
h0 = x * h.0.ln.scale
param h.0.mlp.fc.weight: [4, 4] = normal(0, 0.5)
param h.0.mlp.fc.bias: [4] = uniform(-0.1, 0.1)
h1 = x + tanh(h0 @ h.0.mlp.fc.weight + h.0.mlp.fc.bias)
param h.1.ln.scale: [4] = normal(1, 0.1)
h2 = h1 * h.1.ln.scale
param h.1.mlp.fc.weight: [4, 4] = normal(0, 0.5)
param h.1.mlp.fc.bias: [4] = uniform(-0.1, 0.1)
h3 = h1 + tanh(h2 @ h.1.mlp.fc.weight + h.1.mlp.fc.bias)
loss cost = mean_squared(h3, y)
"""

PARAMS = (
    "h.0.ln.scale",
    "h.0.mlp.fc.weight",
    "h.0.mlp.fc.bias",
    "h.1.ln.scale",
    "h.1.mlp.fc.weight",
    "h.1.mlp.fc.bias",
)


def feeds(rows=3, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=(rows, 4)).astype(np.float32) for k in ("x", "y")}
