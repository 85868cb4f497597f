"""Oracles for model state and randomness: a pure-Python copy of the random ops' hash, and
PyTorch versions of samples/resnet_bn.dl and samples/mlp_dropout.dl trained step by step
beside a dlc Session from the same initial weights (dropout fed the masks dlc drew)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import dlc

M32 = 0xFFFFFFFF


def lowbias32(x: int) -> int:
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def bits(seed: int, step: int, key: int, i: int) -> int:
    h = lowbias32(seed ^ 0x9E3779B9)
    h = lowbias32(h ^ step)
    h = lowbias32(h ^ key)
    return lowbias32(h ^ i)


def uniforms(seed: int, step: int, key: int, n: int) -> np.ndarray:
    return np.array([(bits(seed, step, key, i) >> 8) / 2**24 for i in range(n)])


def random_nodes(graph) -> list[int]:
    return [i for i, n in enumerate(graph.nodes) if n.op in ("random_uniform", "random_normal")]


def drawn(sess: dlc.Session, node: int, dims: dict) -> np.ndarray:
    """What random node `node` draws in the next training step (eval reads the same counter)."""
    (v,) = sess.backend.run(sess.model.graph, [node], {}, dims)
    return np.asarray(v)


def _torch_params(sess: dlc.Session) -> dict[str, torch.Tensor]:
    return {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in sess.params.items()}


def resnet_logits(p, st, pixels, training: bool):
    """samples/resnet_bn.dl in PyTorch (NCHW; dlc's filters are [kh, kw, in, out])."""

    def conv_bn(x, name):
        y = F.conv2d(x, p[f"{name}.K"].permute(3, 2, 0, 1), padding=1)
        w, b = p[f"{name}.gamma"], p[f"{name}.beta"]
        return F.batch_norm(y, st[f"{name}.mean"], st[f"{name}.var"], w, b, training, momentum=0.1, eps=1e-5)

    x = F.relu(conv_bn((pixels / 16).reshape(-1, 1, 8, 8), "stem"))
    for i in range(2):
        h = F.relu(conv_bn(x, f"block.{i}.a"))
        x = F.relu(x + conv_bn(h, f"block.{i}.b"))
    return x.mean((2, 3)) @ p["W"] + p["b"]


def compare_resnet(sess: dlc.Session, data: dict, steps: int, lr: float = 0.01):
    """(dlc's losses, torch's losses, dlc's states, torch's states, dlc's eval logits, torch's)
    after `steps` Adam steps on all of `data`."""
    p = _torch_params(sess)
    st = {n: torch.tensor(v, dtype=torch.float64) for n, v in sess.states.items()}
    pixels = torch.tensor(data["pixels"], dtype=torch.float64)
    labels = torch.tensor(data["labels"]).long()
    opt = torch.optim.Adam(list(p.values()), lr=lr)
    want = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(resnet_logits(p, st, pixels, True), labels)
        loss.backward()
        opt.step()
        want.append(loss.item())
    got = sess.train(data, optimizer=dlc.Adam(lr), steps=steps, batch_size=None, shuffle=False)
    with torch.no_grad():
        logits = resnet_logits(p, st, pixels, False).numpy()
    return got, want, sess.states, {n: v.numpy() for n, v in st.items()}, sess.eval("logits", data), logits


def compare_mlp_dropout(sess: dlc.Session, data: dict, steps: int, lr: float = 0.01):
    """(dlc's losses, torch's, the masks used) over `steps` Adam steps, torch fed the masks
    dlc drew (read back from dlc before each step)."""
    (node,) = random_nodes(sess.model.graph)
    n = len(data["labels"])
    p = _torch_params(sess)
    pixels = torch.tensor(data["pixels"], dtype=torch.float64)
    labels = torch.tensor(data["labels"]).long()
    opt = torch.optim.Adam(list(p.values()), lr=lr)
    optimizer = dlc.Adam(lr)
    got, want, masks = [], [], []
    for _ in range(steps):
        keep = drawn(sess, node, {"B": n}) >= np.float32(0.5)
        masks.append(keep)
        opt.zero_grad()
        h = F.relu((pixels / 16) @ p["W1"] + p["b1"])
        logits = (h * torch.tensor(keep, dtype=torch.float64) / 0.5) @ p["W2"] + p["b2"]
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        opt.step()
        want.append(loss.item())
        got += sess.train(data, optimizer=optimizer, steps=1, batch_size=None, shuffle=False)
    return got, want, masks
