"""Code generation: each fused kernel rendered as a GLSL 4.30 compute shader.

`render(plan, options)` returns one `KernelSource` per kernel, in schedule order. Templates
live in one module per kernel kind; `glsl.py` holds what they share.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlc.runtime.dims import shape_symbols

from ..plan import Plan
from . import kernels_elementwise, kernels_matmul, kernels_norm, kernels_reduce, kernels_window
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
    o = codegen_options(options)
    kernel = plan.fusion.kernels[index]
    ctx = Context(plan.fusion, plan, kernel, dims, nan_check=o.nan_flags)
    if kernel.kind == "elementwise":
        return kernels_elementwise.render(ctx, allow_vec4=o.vec4, local=o.elementwise_local)
    if kernel.kind == "reduce":
        return kernels_reduce.render(ctx)
    if kernel.kind == "matmul":
        return kernels_matmul.render(ctx, o)
    if kernel.kind == "norm":
        return kernels_norm.render(ctx)
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
