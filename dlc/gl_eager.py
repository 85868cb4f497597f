"""Eager kernels on the GPU: one `dlc.ops.Kernel` compiled to GLSL once, run over arrays' buffers.

The GL compiler (`dlc.compiler.pipeline.compile_program`) turns the op's small graph into a
program spec; this module launches it with the argument arrays' own buffers bound to its
input slots (no upload), and hands the buffer the result was written to over to the new array
(no download). Scratch buffers of multi-kernel ops (softmax, ...) are kept per compiled op and
reused by later calls; the GPU runs commands in order, so reuse is safe without waiting.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlc.runtime.context import get_context
from dlc.runtime.executor import eval_size, gpu_copy, group_counts
from dlc.runtime.program import Program, get_program
from dlc.runtime.storage import Buffer


@dataclass
class _Compiled:
    """One eager op's program: its launches, and the buffers it keeps between calls."""

    kernels: list[tuple[Program, tuple[int, ...], tuple[int, int, int]]]  # program, slots, groups
    slots: list[dict]
    input_slot: dict[str, int]      # input name -> slot
    out_slot: int
    out_count: int
    out_slot_count: int  # elements the output's slot holds (>= out_count)
    scratch: dict[int, Buffer] = field(default_factory=dict)  # temp slots but the output's
    consts: dict[int, Buffer] = field(default_factory=dict)


# Kernel -> its program; kernels live in dlc.ops' cache, so in practice entries never go
_programs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run(kernel: Any, handles: list[Buffer]) -> Buffer:
    """Run eager `kernel` over input buffers `handles` (in `kernel.arg_names` order); the
    result is a new buffer the caller owns."""
    compiled = _programs.get(kernel)
    if compiled is None:
        compiled = _programs[kernel] = _compile(kernel)
    buffers: dict[int, Buffer] = {**compiled.scratch, **compiled.consts}
    for name, handle in zip(kernel.arg_names, handles):
        if name in compiled.input_slot:
            buffers[compiled.input_slot[name]] = handle
    out_kind = compiled.slots[compiled.out_slot]["kind"]
    # The planner may share the output's slot with a larger temp written before it.
    out = Buffer(4 * (compiled.out_slot_count if out_kind == "temp" else compiled.out_count))
    if out_kind == "temp":
        buffers[compiled.out_slot] = out
    for program, slots, groups in compiled.kernels:
        program.dispatch(groups, [buffers[s] for s in slots])
    if out_kind != "temp":  # the result is an input's or a constant's storage (a reshape): copy
        gpu_copy(out, buffers[compiled.out_slot], 4 * compiled.out_count)
    return out


def _compile(kernel: Any) -> _Compiled:
    from dlc.compiler.pipeline import compile_program

    program = compile_program(kernel.graph, [kernel.out], name=f"eager_{kernel.name}", ref_dims={})
    spec, sources = program.spec, program.sources
    slots = spec["slots"]
    max_count = get_context().limits["max_work_group_count"]
    launches = []
    for k in spec["kernels"]:
        if k["uniforms"]:
            raise AssertionError(f"eager kernel {k['name']} has symbolic dims {k['uniforms']}")
        launches.append((get_program(sources[k["file"]], k["name"]), tuple(k["slots"]),
                         group_counts(k["grid"], {}, max_count)))
    out_slot = spec["tensors"][str(kernel.out)]["slot"]
    compiled = _Compiled(launches, slots, {s["name"]: i for i, s in enumerate(slots) if s["kind"] == "input"},
                         out_slot, math.prod(kernel.shape),
                         max(eval_size(z, {}) for z in slots[out_slot]["sizes"]))
    for i, s in enumerate(slots):
        if s["kind"] == "const":
            compiled.consts[i] = Buffer.from_array(np.asarray(s["values"], np.float32))
        elif s["kind"] == "temp" and i != out_slot:
            compiled.scratch[i] = Buffer(4 * max(eval_size(z, {}) for z in s["sizes"]))
    return compiled
