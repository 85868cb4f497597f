"""Code generation: each fused kernel rendered as a GLSL 4.30 compute shader.

`render(plan, options)` returns one `KernelSource` per kernel, in schedule order. Templates
live in one module per kernel kind; `glsl.py` holds what they share.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlc.runtime.dims import shape_symbols
from dlc.runtime.sizes import device_limits, over_limits

from ..plan import Plan
from . import (
    kernels_attention,
    kernels_elementwise,
    kernels_matmul,
    kernels_norm,
    kernels_reduce,
    kernels_scatter,
    kernels_window,
    matmul_tuning,
)
from .glsl import Context, KernelSource
from .options import CodegenOptions, codegen_options

__all__ = ["CodegenOptions", "KernelSource", "codegen_options", "dim_index", "render", "render_kernel"]


def dim_index(plan: Plan) -> dict[str, int]:
    """Symbolic dim -> k of its uniform `dim<k>` (sorted by name, program-wide)."""
    names = shape_symbols(n.shape for n in plan.fusion.graph.nodes)
    for n in plan.fusion.graph.nodes:  # dims named only in attrs (dim_size, reshape targets)
        for _, v in n.attrs:
            if isinstance(v, tuple):
                names |= shape_symbols([[d for d in v if isinstance(d, str) and _is_dim(d)]])
    return {d: k for k, d in enumerate(sorted(names))}


def render_kernel(
    plan: Plan, index: int, dims: Mapping[str, int], options: CodegenOptions | Mapping | None = None
) -> KernelSource:
    """Kernel `index` of the plan, within the device's limits (the option `limits`; none: the
    spec minimums). Fusion leaves room for the storage blocks templates add; a matmul whose
    vec4 views of its outputs would still not fit stores scalars, then falls back to the
    16x16 template (no views at all). A kernel past the limits even so is a compile error."""
    o = codegen_options(options)
    limits = device_limits(o.limits)
    if o.limits is None:  # the tuning table's row knows the shared memory of the device it names
        limits["max_shared_memory"] = max(limits["max_shared_memory"], matmul_tuning.entry(o.device)["shared_bytes"])
    ks = _render(plan, index, dims, o)
    why = over_limits(ks.source, ks.local_size, limits)
    matmul = plan.fusion.kernels[index].kind == "matmul"
    if why and matmul:
        ks = _render(plan, index, dims, o.with_(matmul_variant={**(o.matmul_variant or {}), "store4": False}))
        why = over_limits(ks.source, ks.local_size, limits)
    if why and matmul and o.blocking is None:
        ks = _render(plan, index, dims, o.with_(matmul="tile16", matmul_variant=None))
        why = over_limits(ks.source, ks.local_size, limits)
    if why:
        where = "the device's limits" if o.limits else "the GL spec's minimum limits"
        raise ValueError(f"kernel '{ks.name}' {why} (compiling for {where})")
    return ks


def _render(plan: Plan, index: int, dims: Mapping[str, int], o: CodegenOptions) -> KernelSource:
    kernel = plan.fusion.kernels[index]
    ctx = Context(plan.fusion, plan, kernel, dims, nan_check=o.nan_flags)
    if kernel.kind == "elementwise" and kernels_scatter.owns_rows(ctx):
        return kernels_scatter.render(ctx)
    if kernel.kind == "elementwise":
        return kernels_elementwise.render(ctx, allow_vec4=o.vec4, local=o.elementwise_local)
    if kernel.kind == "reduce":
        return kernels_reduce.render(ctx)
    if kernel.kind == "matmul":
        return kernels_matmul.render(ctx, o)
    if kernel.kind == "norm":
        return kernels_norm.render(ctx)
    if kernel.kind == "attention":
        return kernels_attention.render(ctx)
    if kernel.kind == "window":
        return kernels_window.render(ctx, o.conv, o.conv_blocking, o.conv_split)
    raise AssertionError(f"no template for {kernel.kind} kernels")


def render(plan: Plan, options: CodegenOptions | Mapping | None = None) -> list[KernelSource]:
    dims = dim_index(plan)
    options = codegen_options(options)
    return [render_kernel(plan, k, dims, options) for k in range(len(plan.fusion.kernels))]


def _is_dim(text: str) -> bool:
    """A string attr that is a dim: a symbol or a product (`B*T`), not a word like "same"."""
    return all(p.isidentifier() or p.isdigit() for p in text.split("*"))
