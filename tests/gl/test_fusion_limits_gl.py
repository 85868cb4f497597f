"""Kernels within the device's limits: models built to hit each one run on GL and match NumPy.

Each model runs twice: fused for this context's limits (llvmpipe's: 16 storage blocks a
compute shader) and for the spec minimums (8 storage blocks, 16 texture units: what an
artifact compiled offline assumes). Every kernel's shaders are checked against those limits
and the values against the NumPy reference. test_texture_target.py runs this file again where
Mesa has no compute shaders (the texture target).
"""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.backends.gl import GLBackend
from dlc.runtime.sizes import SPEC_MINIMUMS, device_limits, over_limits

pytestmark = pytest.mark.gl

STEPS = 8


def lstm_source(h: int = 4, d: int = 3) -> str:
    """An LSTM unrolled by hand over STEPS steps, its gates sliced from one product and each
    given its own bias: at h = d = 64 (matmuls with vec4 views) one kernel of the Adam step
    bound 17 storage blocks before fusion knew the device's limits (llvmpipe gives 16)."""
    lines = [
        f"input x: [B, {STEPS}, {d}]",
        f"input y: [B, {h}]",
        f"param Wx: [{d}, {4 * h}] = glorot",
        f"param Wh: [{h}, {4 * h}] = glorot",
        *(f"param b{g}: [{h}]" for g in "ifou"),
    ]
    hs = c = None
    for t in range(STEPS):
        xt = f"reshape(slice(x, [0, {t}, 0], [-1, 1, {d}]), [B, {d}])"
        lines.append(f"z{t} = {xt} @ Wx" if hs is None else f"z{t} = {xt} @ Wx + {hs} @ Wh")
        gate = [f"slice(z{t}, [0, {k * h}], [-1, {h}]) + b{g}" for k, g in enumerate("ifou")]
        lines += [f"i{t} = sigmoid({gate[0]})", f"f{t} = sigmoid({gate[1]})", f"o{t} = sigmoid({gate[2]})"]
        lines.append(f"c{t} = i{t} * tanh({gate[3]})" + ("" if c is None else f" + f{t} * {c}"))
        lines.append(f"h{t} = o{t} * tanh(c{t})")
        hs, c = f"h{t}", f"c{t}"
    lines.append(f"loss cost = mean(({hs} - y) ^ 2)")
    return "\n".join(lines) + "\n"


def many_inputs_source(n: int = 24) -> str:
    """One elementwise expression over n inputs, a reduction over them and a matmul epilogue
    reading them all: kernels that would bind n + 1 buffers."""
    xs = [f"x{i}" for i in range(n)]
    src = "".join(f"input {x}: [B, 4]\n" for x in xs) + "param W: [4, 4] = glorot\n"
    expr = " + ".join(f"{xs[i]} * {xs[i + 1]}" if i % 3 == 0 else xs[i] for i in range(n - 1))
    src += f"y = tanh({expr}) / 3\n"
    src += f"s = sum(({expr}) * x{n - 1}, axis=0)\n"
    src += "m = relu(x0 @ W + " + " + ".join(xs[1:]) + ")\n"
    return src


def concat_source(n: int = 40) -> str:
    return "".join(f"input x{i}: [B, 3]\n" for i in range(n)) + (
        "y = concat([" + ", ".join(f"x{i}" for i in range(n)) + "], axis=1) * 2\n"
    )


LIMITS = {"device": None, "spec": SPEC_MINIMUMS}


def _backend(which: str) -> GLBackend:
    return GLBackend({} if LIMITS[which] is None else {"limits": LIMITS[which]})


def _assert_within(backend: GLBackend, limits) -> None:
    """Every shader of every program the backend compiled fits `limits`."""
    from dlc.runtime.device import get_context

    limits = device_limits(limits or get_context().limits)
    checked = 0
    for _, compiled, _ in backend._programs.values():
        texture = backend.target == "texture"
        for name, text in compiled.sources.items():
            local = None if texture else next(k.local_size for k in compiled.spec.kernels if k.file == name)
            assert over_limits(text, local, limits, fragment=texture) is None, name
            checked += 1
    assert checked


@pytest.mark.parametrize("which", list(LIMITS))
@pytest.mark.parametrize("optimizer", ["Adam", "Adamax"])
@pytest.mark.parametrize("size", [4, 64])
def test_hand_unrolled_lstm_trains_within_the_limits(gl, which, optimizer, size):
    model = dlc.compile(lstm_source(size, size))
    rng = np.random.default_rng(0)
    batch = 6 if size < 64 else 64
    feeds = {
        "x": rng.standard_normal((batch, STEPS, size)).astype(np.float32),
        "y": rng.uniform(-0.5, 0.5, (batch, size)).astype(np.float32),
    }
    backend = _backend(which)
    sessions = {"gl": dlc.Session(model, backend=backend, seed=1), "numpy": dlc.Session(model, backend="numpy", seed=1)}
    losses = {
        b: s.train(feeds, optimizer=getattr(dlc, optimizer)(0.01), batch_size=None, steps=4, shuffle=False)
        for b, s in sessions.items()
    }
    np.testing.assert_allclose(losses["gl"], losses["numpy"], rtol=1e-4, atol=1e-6)
    # Adam's and Adamax's steps are about lr whatever the gradient's size, so float32 noise in
    # a gradient near zero moves a param by a fraction of lr: params agree to 1% of a step.
    for p in ("Wx", "Wh", "bi", "bf", "bo", "bu"):
        np.testing.assert_allclose(sessions["gl"].params[p], sessions["numpy"].params[p], rtol=1e-4, atol=1e-4)
    _assert_within(backend, LIMITS[which])


@pytest.mark.parametrize("which", list(LIMITS))
@pytest.mark.parametrize("source", [many_inputs_source, concat_source], ids=["24_inputs", "concat_40"])
def test_kernels_reading_many_tensors_fit_and_match_numpy(gl, which, source):
    model = dlc.compile(source())
    names = [n for n in ("y", "s", "m") if n in model.graph.names]
    rng = np.random.default_rng(2)
    feeds = {
        name: rng.uniform(-1, 1, (5, *model.graph.nodes[model.graph.names[name]].shape[1:])).astype(np.float32)
        for name in model.graph.inputs
    }
    backend = _backend(which)
    got = dlc.Session(model, backend=backend, seed=0).eval(names, feeds)
    want = dlc.Session(model, backend="numpy", seed=0).eval(names, feeds)
    for n in names:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-5, atol=1e-5, err_msg=n)
    _assert_within(backend, LIMITS[which])


def test_a_matmul_whose_vec4_views_would_not_fit_stores_scalars(gl):
    # 11 inputs and 2 outputs fill llvmpipe's 16 blocks but for the vec4 views of the operands;
    # forced vec4 stores would add one block per output: codegen drops them instead.
    n = 9
    src = "input x: [B, 64]\nparam W: [64, 64] = glorot\n" + "".join(f"input c{i}: [64]\n" for i in range(n))
    src += "y1 = x @ W + " + " + ".join(f"c{i}" for i in range(n)) + "\ny2 = tanh(y1)\n"
    model = dlc.compile(src)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.uniform(-1, 1, (256, 64)).astype(np.float32)}
    feeds.update({f"c{i}": rng.uniform(-1, 1, 64).astype(np.float32) for i in range(n)})
    backend = GLBackend({"matmul_variant": {"store4": True}})
    got = dlc.Session(model, backend=backend, seed=0).eval(["y1", "y2"], feeds)
    want = dlc.Session(model, backend="numpy", seed=0).eval(["y1", "y2"], feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    _assert_within(backend, None)
