"""Tensor sizes against what dlc's kernels and the device support.

Kernels index with 32-bit signed ints (GLSL `int`), so no tensor may hold more than
`MAX_ELEMENTS` = 2^31 - 1 elements: dlc refuses larger ones rather than compute with
wrapped-around indexes. The compiler checks fixed shapes (and the fixed part of symbolic
ones) where they are written; `check_bound` checks every tensor of a program again once the
feeds bind its symbolic dims, and every storage slot against the device's storage block size.
Free of GL, the compiler and lark: the compiler imports the limit from here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from . import dims as dim_algebra
from .errors import DataError, RuntimeFailure, format_shape

if TYPE_CHECKING:  # annotations only: the front end imports this module, and spec.py is not cheap
    from .spec import ProgramSpec, TensorInfo

MAX_ELEMENTS = 2**31 - 1  # the largest count a GLSL int index reaches
# Characters in a name (tensor, dim): the front end refuses longer ones where they are written,
# and an artifact's manifest holds none longer (state names join names with '$': 'W$m').
MAX_NAME = 256

# The minimum maximums of GL 4.3 core (compute) and of GL 3.3 core / GLSL ES 3.00 (the
# texture target, WebGL2 included; where the two differ, the smaller): what the compiler
# builds for when no context is at hand, so that an artifact compiled offline runs on any
# conforming device. Keys as in a context's `limits`.
SPEC_MINIMUMS: dict = {
    "max_compute_ssbo_blocks": 8,  # GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS
    "max_ssbo_bindings": 8,  # GL_MAX_SHADER_STORAGE_BUFFER_BINDINGS
    "max_shared_memory": 32768,  # GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
    "max_work_group_size": (1024, 1024, 64),
    "max_work_group_invocations": 1024,
    "max_work_group_count": (65535, 65535, 65535),
    "max_compute_uniform_components": 512,
    "max_texture_units": 16,  # GL_MAX_TEXTURE_IMAGE_UNITS (fragment shader)
    "max_draw_buffers": 4,  # GLSL ES 3.00's (GL 3.3 gives 8)
    "max_fragment_uniform_components": 896,  # GLSL ES 3.00's 224 vectors (GL 3.3 gives 1024)
}


def device_limits(limits: Mapping | None) -> dict:
    """`limits` (a context's), with the spec minimums for any it does not give."""
    return {**SPEC_MINIMUMS, **(limits or {})}


def too_many(count: int, shape: Sequence) -> str | None:
    """Why `count` elements of `shape` cannot be indexed, or None when they can. With symbolic
    dims in `shape`, `count` is the product of its fixed dims (a symbolic dim is at least 1)."""
    if count <= MAX_ELEMENTS:
        return None
    least = " at least" if any(isinstance(d, str) for d in shape) else ""
    return (
        f"{format_shape(shape)} has{least} {count:,} elements, more than the {MAX_ELEMENTS:,} "
        "(2^31 - 1) that dlc's 32-bit index math supports"
    )


def _where(spec: ProgramSpec, t: int) -> str:
    """' (written by kernel K at file:line)' for tensor `t`, when the spec knows."""
    k = spec.producer.get(t)
    if k is None:
        return ""
    kernel = spec.kernels[k]
    locs = [loc for loc in kernel.locs if loc]
    at = f" at {locs[-1][0]}:{locs[-1][1]}" if locs else ""
    return f" (kernel {kernel.name}{at})"


def check_bound(spec: ProgramSpec, dims: Mapping[str, int], max_block_bytes: int) -> None:
    """Refuse a binding of the dims under which a tensor of program `spec` has more elements
    than the index math supports, or a storage slot more bytes than a storage block may."""
    bound = ", ".join(f"{d} = {v}" for d, v in sorted(dims.items()) if d in spec.dims)
    bound = f" with {bound}" if bound else ""
    largest: dict[int, tuple[int, int, TensorInfo]] = {}  # slot -> (count, tensor, info)
    for t, info in spec.tensors.items():
        shape = list(dim_algebra.bind(info.shape, dims))
        count = math.prod(shape)
        why = too_many(count, shape)
        if why:
            raise DataError(f"{_what(spec, info)}{bound}: {why}{_where(spec, t)}")
        if info.slot not in largest or count > largest[info.slot][0]:
            largest[info.slot] = (count, t, info)
    for count, t, info in largest.values():
        if 4 * count > max_block_bytes:
            raise DataError(
                f"{_what(spec, info)}{bound} needs {4 * count:,} bytes, more than this "
                f"GPU's {max_block_bytes:,}-byte storage block limit{_where(spec, t)}"
            )


def _what(spec: ProgramSpec, info: TensorInfo) -> str:
    """ "program 'eval': input 'x' [B, 10]" (or tensor 'y' ...)."""
    kind = "input" if spec.slots[info.slot].kind == "input" else "tensor"
    return f"program '{spec.name}': {kind} '{info.label}' {format_shape(info.shape)}"


_SHARED = re.compile(r"^\s*shared\s+(\w+)\s+\w+((?:\s*\[\s*\d+\s*\])*)\s*;", re.MULTILINE)
_TYPE_BYTES = {
    "float": 4,
    "int": 4,
    "uint": 4,
    "bool": 4,
    "vec2": 8,
    "ivec2": 8,
    "vec3": 12,
    "vec4": 16,
    "ivec4": 16,
    "uvec4": 16,
}


def shared_bytes(source: str) -> int:
    """The shared memory a compute shader's `shared` declarations take (arrays of fixed size;
    what std430-free shared storage may pad is left to the driver's own check)."""
    total = 0
    for type_, dims in _SHARED.findall(source):
        count = math.prod(int(d) for d in re.findall(r"\d+", dims))
        total += _TYPE_BYTES.get(type_, 4) * count
    return total


_BLOCK = re.compile(r"buffer\s+\w+\s*\{")  # no \b: it makes the scan 30 times slower
_UNIFORM = re.compile(r"^uniform\s+(u?int|float|bool|[iu]?vec[234]|sampler2D)\s+\w+\s*;", re.MULTILINE)
_COMPONENTS = {"vec2": 2, "vec3": 3, "vec4": 4, "ivec2": 2, "ivec3": 3, "ivec4": 4, "uvec2": 2, "uvec3": 3, "uvec4": 4}


def storage_blocks(source: str) -> int:
    """The storage blocks a shader declares (a vec4 view of a buffer is a block of its own)."""
    return len(_BLOCK.findall(source))


def uniform_components(source: str) -> tuple[int, int]:
    """(default-block uniform components, samplers) a shader declares."""
    types = _UNIFORM.findall(source)
    samplers = sum(t == "sampler2D" for t in types)
    return sum(_COMPONENTS.get(t, 1) for t in types if t != "sampler2D"), samplers


def over_limits(source: str, local_size: Sequence[int] | None, limits: Mapping, fragment: bool = False) -> str | None:
    """What a shader needs past `limits` (a context's, every key present), or None: on
    compute, its work group, shared memory, storage blocks and uniform components; a
    fragment shader, its samplers and uniform components."""
    components, samplers = uniform_components(source)
    if fragment:
        if samplers > limits["max_texture_units"]:
            return f"reads {samplers} textures; this GPU's fragment shaders read at most {limits['max_texture_units']}"
        if components > limits["max_fragment_uniform_components"]:
            return f"takes {components} uniform components; this GPU allows {limits['max_fragment_uniform_components']}"
        return None
    local_size = tuple(local_size or (1, 1, 1))
    sizes, invocations = limits["max_work_group_size"], limits["max_work_group_invocations"]
    if any(n > m for n, m in zip(local_size, sizes)) or math.prod(local_size) > invocations:
        return (
            f"runs work groups of {local_size} invocations; "
            f"this GPU allows at most {tuple(sizes)} and {invocations} in all"
        )
    shared = shared_bytes(source)
    if shared > limits["max_shared_memory"]:
        return f"needs {shared:,} bytes of shared memory; this GPU allows {limits['max_shared_memory']:,}"
    blocks, most = storage_blocks(source), min(limits["max_compute_ssbo_blocks"], limits["max_ssbo_bindings"])
    if blocks > most:
        return f"declares {blocks} storage blocks; this GPU allows {most} a compute shader"
    if components > limits["max_compute_uniform_components"]:
        return f"takes {components} uniform components; this GPU allows {limits['max_compute_uniform_components']}"
    return None


def check_kernel(name: str, source: str, local_size: Sequence[int], limits: Mapping) -> None:
    """Refuse a kernel that needs more than this GPU allows (`over_limits`), named, before GL
    fails to link it as if dlc's shader were broken."""
    why = over_limits(source, local_size, device_limits(limits))
    if why:
        raise RuntimeFailure(f"kernel '{name}' {why}")
