"""What `dlc info` prints: the GL context found and the backend dlc would use."""

from __future__ import annotations

from . import subnormals
from .device import get_context
from .errors import RuntimeFailure
from .target import choose_target

# Extensions worth knowing about when reading a performance report.
_NOTABLE_EXTENSIONS = ("GL_KHR_shader_subgroup", "GL_NV_gpu_shader5", "GL_ARB_gpu_shader_int64")


def describe() -> str:
    """A few `key: value` lines; never raises for a missing context (says why instead)."""

    try:
        ctx = get_context()
    except RuntimeFailure as exc:
        return f"{exc}\nbackend: numpy"
    if ctx.platform == "egl":
        where = f"EGL device {ctx.device_index}"
        if ctx.device_count is not None:
            where += f" (of {ctx.device_count})"
    else:
        where = "glfw (hidden window)"
    limits = ctx.limits
    notable = [name for name in _NOTABLE_EXTENSIONS if name in ctx.extensions]

    try:
        target, why = choose_target()
        target_line = f"target: {target} ({why})"
    except RuntimeFailure as exc:
        target_line = f"target: none ({exc})"
    lines = [
        f"vendor: {ctx.vendor}",
        f"renderer: {ctx.renderer}",
        f"OpenGL: {ctx.version}",
        f"GLSL: {ctx.glsl_version}",
        f"platform: {where}",
        f"max texture size: {limits['max_texture_size']}",
        f"subnormal floats: {subnormals.of().describe()}",
        f"texture units: {limits['max_texture_units']} a fragment shader",
    ]
    if not ctx.has_compute:
        lines += [
            "compute shaders: none",
            target_line,
            f"extensions: {', '.join(notable) if notable else 'none of note'}",
            "backend: gl",
        ]
        return "\n".join(lines)
    lines += [
        f"max storage block size: {_bytes(limits['max_ssbo_size'])}",
        f"max storage buffer bindings: {limits['max_ssbo_bindings']} "
        f"({limits['max_compute_ssbo_blocks']} per compute shader)",
        f"max work group count: {_triple(limits['max_work_group_count'])}",
        f"max work group size: {_triple(limits['max_work_group_size'])} "
        f"({limits['max_work_group_invocations']} invocations)",
        f"max shared memory: {_bytes(limits['max_shared_memory'])}",
        f"max uniform components: {limits['max_compute_uniform_components']} a compute shader",
        f"extensions: {', '.join(notable) if notable else 'none of note'}",
        target_line,
        "backend: gl",
    ]
    return "\n".join(lines)


def _triple(values: tuple[int, int, int]) -> str:
    return " x ".join(str(v) for v in values)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit} ({n} bytes)"
    return f"{n} bytes"
