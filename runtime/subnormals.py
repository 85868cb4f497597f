"""Whether a device's shaders keep subnormal floats (below 2^-126, 1.2e-38) or flush them to zero.

GPUs differ, and so do the stages of one driver: llvmpipe keeps them in compute shaders and
flushes them in fragment shaders (the texture target); NVIDIA flushes. A probe kernel per
stage finds out, once per device (the answer is kept on it): it multiplies a subnormal operand
by 1 and halves the smallest normal float (a subnormal result), reading both from storage so
that no compiler folds them. `dlc info` reports the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .device import Device, current_device
from .gl import GL
from .program import get_program
from .storage import Buffer
from .textures import FragmentProgram, Texture, render_pass

TINY = np.float32(1e-40)  # subnormal
SMALLEST_NORMAL = np.finfo(np.float32).tiny
PROBE_INPUTS = np.array([TINY, 1.0, SMALLEST_NORMAL, 0.0], np.float32)
KEPT = np.array([TINY, SMALLEST_NORMAL / 2], np.float32)  # the probe's results where they are kept

COMPUTE_PROBE = """#version 430
// dlc runtime: does arithmetic keep subnormal operands and results?
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer B { float v[]; } b;
void main() {
    b.v[4] = b.v[0] * b.v[1];
    b.v[5] = b.v[2] * 0.5;
}
"""

FRAGMENT_PROBE = """#version 330 core
// dlc runtime: does arithmetic keep subnormal operands and results?
uniform sampler2D b0;
layout(location = 0) out float dlc_out;
void main() {
    float tiny = texelFetch(b0, ivec2(0, 0), 0).r, one = texelFetch(b0, ivec2(1, 0), 0).r;
    float smallest = texelFetch(b0, ivec2(2, 0), 0).r;
    dlc_out = int(gl_FragCoord.x) == 0 ? tiny * one : smallest * 0.5;
}
"""


@dataclass(frozen=True)
class Subnormals:
    """Per shader stage: True where subnormals are kept, False where flushed to zero, None
    where the context has no such stage."""

    compute: bool | None
    fragment: bool

    def describe(self) -> str:
        def word(kept: bool) -> str:
            return "kept" if kept else "flushed to zero"

        if self.compute is None:
            return f"{word(self.fragment)} (fragment shaders)"
        if self.compute == self.fragment:
            return f"{word(self.compute)} (compute and fragment shaders)"
        return f"{word(self.compute)} in compute shaders, {word(self.fragment)} in fragment shaders (texture target)"


def of(device: Device | None = None) -> Subnormals:
    """The device's answer (default: the current one), probed on first use and kept on it."""
    device = current_device() if device is None else device.activate()
    if device.subnormals is None:
        compute = _probe_compute(device) if device.context.has_compute else None
        device.subnormals = Subnormals(compute, _probe_fragment())
    return device.subnormals


def _kept(results: np.ndarray) -> bool:
    return bool(np.array_equal(results.view(np.uint32), KEPT.view(np.uint32)))


def _probe_compute(device: Device) -> bool:
    program = get_program(COMPUTE_PROBE, "dlc_subnormal_probe", device)
    buf = Buffer.from_array(np.concatenate([PROBE_INPUTS, np.zeros(2, np.float32)]), device)
    try:
        GL.glUseProgram(program.handle)
        GL.glBindBufferBase(GL.GL_SHADER_STORAGE_BUFFER, 0, buf.handle)
        GL.glDispatchCompute(1, 1, 1)
        GL.glMemoryBarrier(GL.GL_BUFFER_UPDATE_BARRIER_BIT | GL.GL_SHADER_STORAGE_BARRIER_BIT)
        return _kept(buf.download()[4:6])
    finally:
        buf.delete()


def _probe_fragment() -> bool:
    program = FragmentProgram(FRAGMENT_PROBE, "dlc_subnormal_probe")
    inputs, out = Texture(len(PROBE_INPUTS), "the subnormal probe"), Texture(2, "the subnormal probe")
    try:
        inputs.upload(PROBE_INPUTS)
        render_pass(program, out, {0: inputs}, {})
        return _kept(out.download(2))
    finally:
        for t in (inputs, out):
            t.delete()
        program.delete()
