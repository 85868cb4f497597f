"""A third codegen target, in one file: GLSL 4.30 compute shaders without shared memory.

What a target is (compiler/codegen/target.py), shown small: this one subclasses the compute
target for its renderer, header, storage buffers, capabilities and program spec (so the
compute executor runs its programs), and registers its own lowerings for the two kinds
whose compute templates share partial results through shared memory, reduce and matmul:
one invocation an output, looping over the reduced elements or over k (the texture
target's loop bodies, which ask the renderer for every load). Every other kind takes the
compute target's lowering, as `keys` lists the compute key after its own.
"""

from __future__ import annotations

from collections.abc import Callable

from dlc.compiler import registry
from dlc.compiler.codegen import compute, texture
from dlc.compiler.codegen.compute import ComputeTarget
from dlc.compiler.codegen.glsl import Context, Emitter, Ix, KernelSource
from dlc.compiler.codegen.options import CodegenOptions
from dlc.compiler.plan import size_of

KEY = "glsl-compute-noshared"
LOCAL = 64  # invocations a work group: one output each


class NoSharedComputeTarget(ComputeTarget):
    """Compute shaders whose kernels declare no shared memory and wait at no barrier."""

    name = "compute-noshared"
    keys = (KEY, compute.KEY)


def _one_invocation_an_output(body: Callable[[Context, Emitter], str], result: str):
    """A lowering: invocation o runs `body` (a loop leaving the anchor's value in `result`),
    then the kernel's epilogue, and writes every output at element o."""

    def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
        shape = ctx.kernel.shape
        em = Emitter(ctx)
        em.own_element("o", ctx.numel(shape))
        what = body(ctx, em)
        em.anchor_value = result
        em.store_outputs(Ix(flat="o"))
        what = what.replace("fragment", "invocation")  # the loop bodies are the texture target's
        lines = compute.header(ctx, f"{what}, no shared memory", (LOCAL, 1, 1))
        text = "\n".join([*lines, "void main() {", *em.lines, "}"]) + "\n"
        grid = {"flat": list(size_of(shape)), "per_group": LOCAL}
        return compute.kernel_source(ctx, text, grid, (LOCAL, 1, 1))

    return lower


registry.register_lowering("reduce", KEY, _one_invocation_an_output(texture.reduce_body, "acc_result"))
registry.register_lowering("matmul", KEY, _one_invocation_an_output(texture.matmul_body, "acc"))

NOSHARED = NoSharedComputeTarget()
