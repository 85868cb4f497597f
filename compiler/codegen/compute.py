"""The compute target: each fused kernel a GLSL 4.30 compute shader over std430 storage
buffers (`b<k>.v[i]`), run by runtime/executor.py.

Its kernel templates live one module per kernel kind (kernels_*.py); each registers its
lowering for `KEY` with the registry (`fn(ctx, options) -> KernelSource`). This module holds
what they share on this target: the shader header (version, the IR comment, work group size,
storage blocks, uniforms, the preamble), the work group's number, the tiled kernels' group
decoding and `kernel_source`; and `ComputeTarget`, which renders a plan's kernels within the
device's limits and makes the program spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dlc.runtime.sizes import device_limits, over_limits

from ..fusion import Capabilities
from ..ir import format_shape
from ..limits import capabilities
from ..plan import Plan
from . import glsl, matmul_tuning
from .glsl import PREAMBLE, Context, Emitter, KernelSource, comment, source_name, uniform_lines
from .options import CodegenOptions, codegen_options
from .program import dim_index, program_spec
from .renderer import COMPUTE as RENDERER
from .renderer import Renderer
from .target import Rendered, Target, register_target

KEY = "glsl-compute"  # this target's lowerings in the registry


def header(ctx: Context, kind_line: str, local: tuple[int, int, int], extra: Sequence[str] = ()) -> list[str]:
    """Version, the comment listing the IR, work group size, buffers and uniforms."""
    g, k = ctx.graph, ctx.kernel
    lines = [*ctx.renderer.version_lines(), f"// kernel {k.name}: {comment(kind_line)}", "// implements:"]
    for n, text in zip(k.nodes, ctx.ir_lines):
        where = g.nodes[n].loc
        at = f"  ({source_name(where)}:{where.line})" if where else ""
        lines.append("//   " + comment(text + at))
    lx, ly, lz = local
    lines.append(f"layout(local_size_x = {lx}, local_size_y = {ly}, local_size_z = {lz}) in;")
    slot_tensors: dict[int, list[int]] = {}
    for t in (*k.inputs, *k.outputs):
        slot_tensors.setdefault(ctx.plan.slot_of[t], []).append(t)
    for slot, b in sorted(ctx.binding.items(), key=lambda kv: kv[1]):
        r, w = slot in ctx.read_slots, slot in ctx.write_slots
        qual = "restrict readonly " if r and not w else "restrict writeonly " if w and not r else ""
        what = ", ".join(f"{g.label(t)} {format_shape(g.nodes[t].shape)}" for t in slot_tensors[slot])
        member = "vec4 v[];" if slot in ctx.vec_slots else "float v[];"
        decl = f"layout(std430, binding = {b}) {qual}buffer B{b} {{ {member} }} b{b};"
        lines.append(f"{decl}  // {comment(what)}")
    if ctx.nan_flags:
        binding = len(ctx.binding) + ctx.scratch_buffers  # the executor binds them in this order
        lines.append(
            f"layout(std430, binding = {binding}) buffer DLCNaN {{ float f[]; }} dlc_nan;  // debug mode: NaN flags"
        )
    lines += uniform_lines(ctx)
    lines.extend(extra)
    lines.append("")
    lines.append(PREAMBLE)
    return lines


def shared_limit(options: CodegenOptions) -> int:
    """The bytes of shared memory a work group may declare: the device's limit where the
    option `limits` gives it, else the spec's minimum or, if more, what the tuning table's row
    of the device named by the option `device` says it has."""
    if options.limits is not None:
        return int(device_limits(options.limits)["max_shared_memory"])
    return max(int(device_limits(None)["max_shared_memory"]), matmul_tuning.entry(options.device)["shared_bytes"])


def group_index() -> str:
    """This work group's number on a 3D grid of groups."""
    return RENDERER.group_index()


def scratch_buffer(ctx: Context, holds: str) -> str:
    """The declaration of a kernel's scratch buffer `sc` (uints), bound after its slots: the
    executor binds one there, sized by its grid (runtime/executor.py `scratch_words`), zeroed
    when made. Call it before `header` (debug mode's NaN flags bind after the scratch)."""
    ctx.scratch_buffers = 1
    return f"layout(std430, binding = {len(ctx.binding)}) coherent buffer BS {{ uint w[]; }} sc;  // scratch: {holds}"


def count_in(em: Emitter, counter: str, chunks: str, flag: str = "last_group") -> None:
    """A split kernel's group after its invocations stored their partials in scratch: it
    counts itself in on `sc.w[counter]`, and all but the last of the `chunks` groups that
    share the counter leave (the whole group together: `flag` is a `shared bool` the kernel
    declares). What follows runs in the last group only, which sees every partial: it adds
    them in chunk order (the same bits every run, whatever order the groups ran in) and
    sets the counter back to 0 for the next launch. (The split-K GEMM does the same with
    its flag in its slab array: kernels_matmul._split_k.)"""
    em.line("memoryBarrierBuffer();")
    em.line("barrier();")
    em.open("if (gl_LocalInvocationIndex == 0u)")
    em.line(f"{flag} = atomicAdd(sc.w[{counter}], 1u) == uint({chunks} - 1);")
    em.close()
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.line(f"if (!{flag}) return;  // the whole group leaves together")
    em.line("memoryBarrierBuffer();")


TILE_AXES = "xyz"
TILE = "dlc_tile"  # a tiled kernel's tile coordinates (uvec3): its templates write this, never gl_WorkGroupID


def tile_lines(grid: dict) -> tuple[list[str], list[str]]:
    """A tiled kernel (grid "tiles") made to run on any grid within the device's group-count
    limits: (the declarations before its main(), the first lines of main()). main() numbers
    its group linearly over the grid the runtime dispatched, leaves when that is past the last
    tile, and decodes the tile's coordinates into `TILE`. Tile counts are constants when the
    sizes are fixed, else `dlc_tiles_<axis>` int uniforms the runtime sets."""
    counts, decls = [], []
    for axis, (size, tile) in zip(TILE_AXES, grid["tiles"]):
        if len(size) == 1:
            counts.append(f"{-(-int(size[0]) // int(tile))}u")
        else:
            counts.append(f"uint(dlc_tiles_{axis})")
            decls.append(f"uniform int dlc_tiles_{axis};  // tiles along {axis}, set by the runtime")
    tx, ty, tz = counts
    prologue = [
        "    uint dlc_linear = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y)"
        " * gl_NumWorkGroups.x + gl_WorkGroupID.x;",
        f"    if (dlc_linear >= {tx} * {ty} * {tz}) return;  // past the last tile: the group leaves",
        f"    {TILE} = uvec3(dlc_linear % {tx}, (dlc_linear / {tx}) % {ty}, dlc_linear / ({tx} * {ty}));",
    ]
    return [*decls, f"uvec3 {TILE};  // this group's tile", ""], prologue


def kernel_source(ctx: Context, text: str, grid: dict, local: tuple[int, int, int]) -> KernelSource:
    """The KernelSource of a compute shader's text; a tiled one gets `tile_lines` around its
    main() line."""
    if "tiles" in grid:
        head, main, body = text.partition("void main() {\n")
        if not main or "gl_WorkGroupID" in body:
            raise AssertionError(f"kernel {ctx.kernel.name}: a tiled kernel without main(), or reading gl_WorkGroupID")
        decls, prologue = tile_lines(grid)
        text = head + "\n".join(decls) + main + "\n".join(prologue) + "\n" + body
    return glsl.kernel_source(ctx, text, grid, local)


class ComputeTarget(Target):
    """GLSL 4.30 compute shaders over storage buffers (module docstring)."""

    name = "compute"
    runtime = "compute"
    keys = (KEY,)

    def renderer(self, options: CodegenOptions) -> Renderer:
        return RENDERER

    def capabilities(self, options: CodegenOptions) -> Capabilities:
        return capabilities("compute", options.limits, options.nan_flags)

    def render(self, name: str, plan: Plan, options: CodegenOptions) -> Rendered:
        dims = dim_index(plan)
        kernels = [self.render_kernel(plan, k, dims, options) for k in range(len(plan.fusion.kernels))]
        spec, sources = program_spec(name, plan, kernels, self.runtime)
        return Rendered(spec, sources, kernels)

    def render_kernel(
        self, plan: Plan, index: int, dims: Mapping[str, int], options: CodegenOptions | Mapping | None = None
    ) -> KernelSource:
        """Kernel `index` of the plan, within the device's limits (the option `limits`; none:
        the spec minimums). Fusion leaves room for the storage blocks templates add; a matmul
        whose vec4 views of its outputs would still not fit stores scalars, then falls back to
        the 16x16 template (no views at all). A kernel past the limits even so is a compile
        error."""
        o = codegen_options(options)
        limits = {**device_limits(o.limits), "max_shared_memory": shared_limit(o)}
        ks = self._render(plan, index, dims, o)
        why = over_limits(ks.source, ks.local_size, limits)
        matmul = plan.fusion.kernels[index].kind == "matmul"
        if why and matmul:
            ks = self._render(plan, index, dims, o.with_(matmul_variant={**(o.matmul_variant or {}), "store4": False}))
            why = over_limits(ks.source, ks.local_size, limits)
        if why and matmul and o.blocking is None:
            ks = self._render(plan, index, dims, o.with_(matmul="tile16", matmul_variant=None))
            why = over_limits(ks.source, ks.local_size, limits)
        if why:
            where = "the device's limits" if o.limits else "the GL spec's minimum limits"
            raise ValueError(f"kernel '{ks.name}' {why} (compiling for {where})")
        return ks

    def _render(self, plan: Plan, index: int, dims: Mapping[str, int], o: CodegenOptions) -> KernelSource:
        kernel = plan.fusion.kernels[index]
        ctx = Context(plan.fusion, plan, kernel, dims, nan_check=o.nan_flags, renderer=self.renderer(o), keys=self.keys)
        return self.template(kernel.kind)(ctx, o)


COMPUTE = register_target(ComputeTarget())
