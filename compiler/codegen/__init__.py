"""Code generation: a planned program rendered by a target (target.py) into its shaders and
program spec.

Targets: `COMPUTE` (compute.py: GLSL 4.30 compute shaders) and `TEXTURE` (texture.py: GLSL
3.30 / ES 3.00 fragment shaders); `get_target(name)`. Each kernel kind's template is a
lowering registered in the registry under the target's key: importing this package loads
every template module (kernels_*.py for compute, texture.py for texture), which registers
them. `glsl.py` holds what all GLSL targets share (the Emitter, the preamble).

`render(plan, options)` is the compute target's KernelSources, in schedule order.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..plan import Plan
from . import (  # noqa: F401  (each registers its lowerings)
    kernels_attention,
    kernels_elementwise,
    kernels_kv_cache,
    kernels_matmul,
    kernels_norm,
    kernels_reduce,
    kernels_window,
)
from .compute import COMPUTE
from .glsl import KernelSource
from .options import CodegenOptions, codegen_options
from .program import dim_index
from .target import Rendered, Target, TargetError, get_target, register_target
from .texture import TEXTURE

__all__ = [
    "COMPUTE",
    "TEXTURE",
    "CodegenOptions",
    "KernelSource",
    "Rendered",
    "Target",
    "TargetError",
    "codegen_options",
    "dim_index",
    "get_target",
    "register_target",
    "render",
    "render_kernel",
]


def render_kernel(
    plan: Plan, index: int, dims: Mapping[str, int], options: CodegenOptions | Mapping | None = None
) -> KernelSource:
    """Kernel `index` of the plan on the compute target (ComputeTarget.render_kernel)."""
    return COMPUTE.render_kernel(plan, index, dims, options)


def render(plan: Plan, options: CodegenOptions | Mapping | None = None) -> list[KernelSource]:
    """Every kernel of the plan on the compute target, in schedule order."""
    dims = dim_index(plan)
    options = codegen_options(options)
    return [COMPUTE.render_kernel(plan, k, dims, options) for k in range(len(plan.fusion.kernels))]
