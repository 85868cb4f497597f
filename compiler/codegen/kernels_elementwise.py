"""Elementwise kernels: one invocation per output element, or (compute target) per four:

- when every access is element for element, buffers are read and written as vec4 and the
  fused expression is evaluated once per lane (`_render_vec4`);
- else, where the last axis is a known multiple of 4 (a transpose or slice of heads, a split's
  gradient), four neighbours along it (`_render_rows4`): their coordinates are found once (the
  divisions by symbolic dims are most of such a kernel's work), each lane reads its inputs at
  them, and the four results are stored as one vec4.

`main_body` is the one-per-element body of both targets; the renderer says how an invocation
finds its element and how it stores."""

from __future__ import annotations

from collections.abc import Sequence

from .. import registry
from ..ir import format_shape
from ..plan import size_of
from . import index, kernels_scatter
from .compute import KEY, header, kernel_source
from .glsl import LOCAL, VEC, Context, Emitter, Ix, KernelSource, NotVectorizable, numel_known
from .options import CodegenOptions

LANES = "xyzw"


def render(ctx: Context, allow_vec4: bool = True, local: int = LOCAL) -> KernelSource:
    size = size_of(ctx.kernel.shape)
    if allow_vec4 and size[0] % 4 == 0:
        for attempt in (_render_vec4, _render_rows4):
            try:  # each on a fresh context: a failed attempt leaves no declarations behind
                return attempt(_fresh(ctx), local)
            except NotVectorizable:
                pass
    return _render_scalar(ctx, local)


def _fresh(ctx: Context) -> Context:
    return Context(
        ctx.fusion, ctx.plan, ctx.kernel, ctx.dim_index, nan_check=ctx.nan_check, renderer=ctx.renderer, keys=ctx.keys
    )


def main_body(em: Emitter, outputs: Sequence[int] | None = None, var: str = "i") -> None:
    """One invocation per element: find it, leave past the end, store each output there."""
    ix = em.own_element(var, em.ctx.numel(em.ctx.kernel.shape))
    em.store_outputs(ix, outputs)


def _render_scalar(ctx: Context, LOCAL: int) -> KernelSource:  # noqa: N803
    k = ctx.kernel
    em = Emitter(ctx)
    main_body(em)
    body = ["void main() {", *em.lines, "}"]
    text = "\n".join(header(ctx, f"elementwise over {format_shape(k.shape)}", (LOCAL, 1, 1)) + body)
    return kernel_source(ctx, text + "\n", {"flat": list(size_of(k.shape)), "per_group": LOCAL}, (LOCAL, 1, 1))


def _render_vec4(ctx: Context, LOCAL: int) -> KernelSource:  # noqa: N803
    k = ctx.kernel
    size = size_of(k.shape)
    quarter = (size[0] // 4, *size[1:])
    em = Emitter(ctx)
    em.own_element("i4", ctx.numel(quarter))
    lanes: dict[int, list[str]] = {o: [] for o in k.outputs}
    for lane in LANES:
        em.vec_component = lane
        em.scopes.append({})
        em.line(f"// lane {lane}")
        for o in k.outputs:
            lanes[o].append(em.value(o, Ix(flat=VEC)))
        em.scopes.pop()
    return _fours(ctx, em, lanes, quarter, "4 elements an invocation", LOCAL)


def _render_rows4(ctx: Context, LOCAL: int) -> KernelSource:  # noqa: N803
    k = ctx.kernel
    shape = k.shape
    last = numel_known(shape[-1:]) if shape else None
    if last is None or last % 4:
        raise NotVectorizable("the last axis is no known multiple of 4")
    if any(ctx.graph.nodes[o].shape != shape for o in k.outputs):
        raise NotVectorizable("an output of another shape")
    size = size_of(shape)
    quarter = (size[0] // 4, *size[1:])
    em = Emitter(ctx)
    em.own_element("i4", ctx.numel(quarter))
    first = em.coords(Ix(flat="(i4 * 4)"), shape)  # the first of the four: found once
    lanes: dict[int, list[str]] = {o: [] for o in k.outputs}
    for lane in range(4):
        em.scopes.append({})
        em.line(f"// element {lane} of the four")
        at = Ix(multi=(*first[:-1], index.add(first[-1], str(lane)) if lane else first[-1]))
        for o in k.outputs:
            lanes[o].append(em.value(o, at))
        em.scopes.pop()
    return _fours(ctx, em, lanes, quarter, "4 neighbours along the last axis an invocation", LOCAL)


def _fours(ctx: Context, em: Emitter, lanes: dict[int, list[str]], quarter, how: str, LOCAL: int) -> KernelSource:  # noqa: N803
    """The end of a four-an-invocation kernel: each output's four values stored as a vec4."""
    for o in ctx.kernel.outputs:
        slot = ctx.plan.slot_of[o]
        if slot in ctx.read_slots and slot not in ctx.vec_slots:
            raise NotVectorizable("an in-place output read as scalars")
        ctx.vec_slots.add(slot)
        em.line(ctx.renderer.store(ctx.buf(o), "i4", f"vec4({', '.join(lanes[o])})"))
    body = ["void main() {", *em.lines, "}"]
    text = "\n".join(header(ctx, f"elementwise over {format_shape(ctx.kernel.shape)}, {how}", (LOCAL, 1, 1)) + body)
    return kernel_source(ctx, text + "\n", {"flat": list(quarter), "per_group": LOCAL}, (LOCAL, 1, 1))


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of elementwise kernels: a scatter's rows (kernels_scatter)
    or one invocation per element (vec4s where the options allow)."""
    if kernels_scatter.owns_rows(ctx):
        return kernels_scatter.render(ctx, options)
    return render(ctx, allow_vec4=options.vec4, local=options.elementwise_local)


registry.register_lowering("elementwise", KEY, lower)
