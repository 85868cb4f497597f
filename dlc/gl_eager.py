"""Eager kernels on the GPU: one `dlc.ops.Kernel` compiled to GLSL once, run over arrays' buffers.

The GL compiler (`dlc.compiler.pipeline.compile_program`) turns the op's small graph into a
program spec; this module launches it with the argument arrays' own buffers bound to its
input slots (no upload), sets the call's numbers as float uniforms and its dims (a flat
kernel's length) as int uniforms, and hands the buffer the result was written to over to the
new array (no download). Scratch buffers of multi-kernel ops (softmax, ...) are kept per
compiled op and reused by later calls; the GPU runs commands in order, so reuse is safe
without waiting. `drop` frees them when `dlc.ops` evicts the op.

Programs come from the runtime's LRU program cache unpinned: a launch whose program was
evicted links it again from its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlc.runtime.context import get_context
from dlc.runtime.executor import eval_size, forget_uniforms, gpu_copy, group_counts, scratch_words
from dlc.runtime.program import Program, get_program
from dlc.runtime.storage import Buffer


@dataclass
class _Launch:
    program: Program
    slots: tuple[int, ...]
    grid: dict
    dims: dict[str, str]  # int uniform -> symbolic dim
    scalars: dict[str, str]  # float uniform -> number input name


@dataclass
class _Compiled:
    """One eager op's program: its launches, and the buffers it keeps between calls."""

    launches: list[_Launch]
    slots: list[dict]
    input_slot: dict[str, int]  # input name -> slot
    out_slot: int
    scratch: dict[int, Buffer] = field(default_factory=dict)  # temp slots but the output's
    consts: dict[int, Buffer] = field(default_factory=dict)
    split: dict[int, Buffer] = field(default_factory=dict)  # launch -> a split reduction's scratch

    def delete(self) -> None:
        for buf in (*self.scratch.values(), *self.consts.values(), *self.split.values()):
            buf.delete()
        self.scratch.clear()
        self.consts.clear()
        self.split.clear()


# Kernel -> its compiled program; dlc.ops calls `drop` when it evicts the kernel
_compiled: dict[Any, _Compiled] = {}


def compiled_ops() -> int:
    """How many eager ops hold compiled programs (and maybe buffers) on the GPU."""
    return len(_compiled)


def drop(kernel: Any) -> None:
    """Free what `kernel` holds on the GPU (its programs stay in the program cache)."""
    compiled = _compiled.pop(kernel, None)
    if compiled is not None:
        compiled.delete()


def run(call: Any, handles: list[Buffer]) -> Buffer:
    """Run eager `call` (a `dlc.ops.Call`) over input buffers `handles` (in `arg_names`
    order); the result is a new buffer the caller owns."""
    kernel, dims = call.kernel, call.dims
    compiled = _compiled.get(kernel)
    if compiled is None:
        compiled = _compiled[kernel] = _compile(kernel, dims)
    scalars = dict(zip(kernel.scalar_names, call.scalars))
    buffers: dict[int, Buffer] = {**compiled.consts}
    for s, buf in compiled.scratch.items():
        need = 4 * max(eval_size(z, dims) for z in compiled.slots[s]["sizes"])
        if buf.nbytes < need:  # a flat kernel called on a longer array
            buf.delete()
            buf = compiled.scratch[s] = Buffer(need)
        buffers[s] = buf
    for name, handle in zip(kernel.arg_names, handles):
        if name in compiled.input_slot:
            buffers[compiled.input_slot[name]] = handle
    count = math.prod(call.shape)
    out_slot = compiled.slots[compiled.out_slot]
    if out_slot["kind"] == "temp":  # the planner may share it with a larger temp written before it
        out = Buffer(4 * max(count, *(eval_size(z, dims) for z in out_slot["sizes"])))
    else:
        out = Buffer(4 * count)
    if out_slot["kind"] == "temp":
        buffers[compiled.out_slot] = out
    max_count = get_context().limits["max_work_group_count"]
    for j, launch in enumerate(compiled.launches):
        program = launch.program
        if not program.handle:  # evicted from the program cache: link it again
            program = launch.program = get_program(program.source, program.name)
        for uniform, dim in launch.dims.items():
            program.set_int(uniform, dims[dim])
        for uniform, name in launch.scalars.items():
            program.set_float(uniform, scalars[name])
        if launch.dims:  # executors sharing this program must set their dims again
            forget_uniforms(program.handle)
        bound = [buffers[s] for s in launch.slots]
        words = scratch_words(launch.grid, dims)
        if words:  # a split reduction's counters and partials, bound after its slots
            buf = compiled.split.get(j)
            if buf is None or buf.nbytes < 4 * words:  # zeroed once: the kernel resets its counters
                if buf is not None:
                    buf.delete()
                buf = compiled.split[j] = Buffer(4 * words, zero=True)
            bound.append(buf)
        program.dispatch(group_counts(launch.grid, dims, max_count), bound)
    if out_slot["kind"] == "temp":
        return out
    if out_slot.get("name") in scalars:  # the result is a number as it came (a reshape of it)
        out.upload(np.full(count, scalars[out_slot["name"]], np.float32))
    else:  # an input's or a constant's storage (a reshape): copy
        gpu_copy(out, buffers[compiled.out_slot], 4 * count)
    return out


def _compile(kernel: Any, dims: dict) -> _Compiled:
    from dlc.compiler.pipeline import compile_program

    options = {"device": get_context().renderer}  # the matmul tuning table's row for this GPU
    program = compile_program(kernel.graph, [kernel.out], name=f"eager_{kernel.name}", ref_dims=dims, options=options)
    spec, sources = program.spec, program.sources
    slots = spec["slots"]
    launches = [
        _Launch(
            get_program(sources[k["file"]], k["name"]),
            tuple(k["slots"]),
            k["grid"],
            dict(k["uniforms"]),
            dict(k.get("scalars", {})),
        )
        for k in spec["kernels"]
    ]
    out_slot = spec["tensors"][str(kernel.out)]["slot"]
    compiled = _Compiled(launches, slots, {s["name"]: i for i, s in enumerate(slots) if s["kind"] == "input"}, out_slot)
    for i, s in enumerate(slots):
        if s["kind"] == "const":
            compiled.consts[i] = Buffer.from_array(np.asarray(s["values"], np.float32))
        elif s["kind"] == "temp" and i != out_slot:
            compiled.scratch[i] = Buffer(4 * max(eval_size(z, dims) for z in s["sizes"]))
    return compiled
