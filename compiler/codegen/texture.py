"""The texture target: each kernel output rendered by a fragment shader into a float texture.

For GL without compute shaders (macOS's 4.1, WebGL2): one fragment computes one output element.
Every storage slot is a 2D R32F texture holding the slot's floats row-major from the flat index
(the width is the texture's own, read with `textureSize`); the fragment at (x, y) of the output
texture computes element `y * dlc_width + x`. The same fusion (with this target's
capabilities: one output a kernel), plan, `Emitter` and index algebra as the compute target are
used; the `GLSLTexture` renderer (renderer.py) makes a load `dlc_load(b<k>, i)` (a `texelFetch`,
`b<k>` a sampler on texture unit k), a store `dlc_out = v`, and the own element the fragment's.
A kernel with several outputs renders one pass (one shader) per output (fragment.py: the
passes and their header), run by runtime/texture_executor.py.

`TextureTarget` registers a lowering per kernel kind under `KEY` (`fn(ctx, options) ->
TextureKernel`). Reductions, matmuls and window ops are per-output loops (a sum whose plain
result is inf or NaN sums again with its terms times 2^-32, as on the compute target); large
matmuls and convolutions take texture_matmul.py's packed passes. The loops `reduce_body` and
`matmul_body` read and write only through the renderer: any target without shared memory
may use them (tests/codegen/targets/compute_noshared.py does). The version line is
`#version 330 core`, or `#version 300 es` with `precision highp` for WebGL2 (the `es`
option); the text writes no implicit int -> float conversion (GLSL ES refuses them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from dlc.runtime.sizes import device_limits, over_limits
from dlc.runtime.spec import Packed, Pass, PassScratch

from .. import registry
from ..fusion import Capabilities
from ..limits import capabilities
from ..plan import Plan, size_of
from . import kernels_attention, kernels_elementwise, kernels_norm, kernels_window, texture_matmul
from .fragment import TextureKernel, TexturePass, finish
from .glsl import Context, Emitter, Ix, KernelSource, kernel_source, mul, numel_known
from .index import broadcast_coords
from .kernels_reduce import geometry
from .options import CodegenOptions, codegen_options
from .program import dim_index, program_spec
from .reductions import BETTER, INIT, UP
from .renderer import GLSLESTexture, GLSLTexture, Renderer
from .target import Rendered, Target, TargetError, register_target

__all__ = ["TEXTURE", "TextureKernel", "TexturePass", "TextureTarget", "TextureTargetError"]

KEY = "glsl-texture"  # this target's lowerings in the registry
TextureTargetError = TargetError  # a kernel the texture target cannot render (names the op)

SPLIT = 1024  # a sum/max/min over more (or a symbolic number of) elements runs in two passes
PARTS = 64  # partial results per output in the first of them
RESCAN = 65535 - 2 * PARTS  # a split sum that overflowed sums its parts again up to this size


class TextureTarget(Target):
    """GLSL 3.30 core (or ES 3.00: the `es` option) fragment shaders over float textures."""

    name = "texture"
    runtime = "texture"
    keys = (KEY,)

    def renderer(self, options: CodegenOptions) -> Renderer:
        return GLSLESTexture() if options.es else GLSLTexture()

    def capabilities(self, options: CodegenOptions) -> Capabilities:
        return capabilities("texture", options.limits, options.nan_flags)

    def kernels(self, plan: Plan, options: CodegenOptions | Mapping | None = None) -> list[TextureKernel]:
        """Every kernel of the plan as its passes, in schedule order."""
        o = codegen_options(options)
        dims = dim_index(plan)
        limits = device_limits(o.limits)
        rendered = [self.render_kernel(plan, k, dims, o) for k in range(len(plan.fusion.kernels))]
        for t in rendered:  # fusion kept each within the device's texture units (compiler/limits.py)
            for p in t.passes:
                why = over_limits(p.source, None, limits, fragment=True)
                if why:
                    raise ValueError(f"internal dlc error: kernel '{t.kernel.name}' {why}")
        return rendered

    def render_kernel(self, plan: Plan, index: int, dims: Mapping[str, int], o: CodegenOptions) -> TextureKernel:
        kernel = plan.fusion.kernels[index]
        ctx = Context(plan.fusion, plan, kernel, dims, renderer=self.renderer(o), keys=self.keys)
        rendered = self.template(kernel.kind)(ctx, o)
        return packed_loads(ctx, rendered, o.packed_params) if o.packed_params else rendered

    def render(self, name: str, plan: Plan, options: CodegenOptions) -> Rendered:
        """The program spec (program.program_spec's, with this target's runtime and each
        kernel's passes) and its shader files."""
        kernels = self.kernels(plan, options)
        spec, _ = program_spec(name, plan, [t.kernel for t in kernels], self.runtime)
        sources: dict[str, str] = {}
        texture_kernels = []
        for ks, t in zip(spec.kernels, kernels):
            passes = []
            for p in t.passes:
                what = f"pack{p.into}" if p.into is not None else "partials" if p.tensor is None else p.tensor
                file = f"{name}_{ks.name}_{what}.frag"
                sources[file] = p.source
                passes.append(Pass(file, p.tensor, p.into))
            scratch = None if t.scratch is None else PassScratch(tuple(t.scratch["size"]), t.scratch["unit"])
            packed = tuple(Packed(q["unit"], tuple(q["rows"]), tuple(q["depth"]), q["label"]) for q in t.packed)
            texture_kernels.append(
                replace(ks, file=None, grid=None, local_size=None, passes=tuple(passes), scratch=scratch, packed=packed)
            )
        spec = replace(spec, kernels=tuple(texture_kernels))
        return Rendered(spec, sources, [t.kernel for t in kernels])


TEXTURE = register_target(TextureTarget())

# -- the lowerings: fn(ctx, options) -> TextureKernel --------------------------------------

Body = Callable[[Context, Emitter], str]  # writes output o's `acc` (or its anchor), says what


def spec_source(ctx: Context) -> KernelSource:
    """The kernel's KernelSource for the spec (no text: its passes are the shaders)."""
    return kernel_source(ctx, "", {"flat": [1], "per_group": 1}, (1, 1, 1))


def output_pass(ctx: Context, output: int, body: Body, anchor: str = "acc") -> str:
    """Output `output`'s pass: fragment o runs `body`, whose result `anchor` the epilogue reads."""
    em = Emitter(ctx)
    em.own_element("o", ctx.numel(ctx.kernel.shape))
    what = body(ctx, em)
    em.anchor_value = anchor
    em.store_outputs(Ix(flat="o"), (output,))
    return finish(ctx, em, output, what)


def output_passes(ctx: Context, body: Body, anchor: str = "acc") -> TextureKernel:
    """A kernel of one pass per output, each fragment running `body` for its element."""
    passes = tuple(TexturePass(o, output_pass(ctx, o, body, anchor)) for o in ctx.kernel.outputs)
    return TextureKernel(spec_source(ctx), passes)


def _elementwise(ctx: Context, options: CodegenOptions) -> TextureKernel:
    passes = []
    for o in ctx.kernel.outputs:
        em = Emitter(ctx)
        kernels_elementwise.main_body(em, (o,))
        passes.append(TexturePass(o, finish(ctx, em, o, "elementwise")))
    return TextureKernel(spec_source(ctx), tuple(passes))


def _reduce(ctx: Context, options: CodegenOptions) -> TextureKernel:
    if not _split(ctx):
        return output_passes(ctx, reduce_body, "acc_result")
    # Tree reduction in two passes: PARTS partials per output, then one fragment per
    # output combines them (and runs the epilogue), reading them on a spare texture unit.
    unit = len(ctx.binding)
    size = size_of(ctx.graph.nodes[ctx.kernel.anchor].shape)
    scratch = {"size": [size[0] * PARTS, *size[1:]], "unit": unit}
    passes = [TexturePass(None, _partials_pass(ctx))]
    for o in ctx.kernel.outputs:
        passes.append(TexturePass(o, output_pass(ctx, o, lambda ctx, em: _combine_body(ctx, em, unit))))
    return TextureKernel(spec_source(ctx), tuple(passes), scratch)


def _packs(ctx: Context, options: CodegenOptions) -> bool:
    """Whether this matmul or conv takes texture_matmul's packed passes (the `packed` option
    on, None meaning on)."""
    return options.packed is not False and texture_matmul.applies(ctx)


def _matmul(ctx: Context, options: CodegenOptions) -> TextureKernel:
    if _packs(ctx, options):
        return texture_matmul.render_kernel(ctx, options.es, options.packed_params)
    return output_passes(ctx, matmul_body)


def _window(ctx: Context, options: CodegenOptions) -> TextureKernel:
    if _packs(ctx, options):
        return texture_matmul.render_kernel(ctx, options.es)
    node = ctx.graph.nodes[ctx.kernel.anchor]
    body = kernels_window.BODIES.get(node.op)
    if body is None:
        raise TextureTargetError(f"the texture target has no kernel for op '{node.op}'")
    return output_passes(ctx, lambda ctx, em: body(ctx, em, node))


def _norm(ctx: Context, options: CodegenOptions) -> TextureKernel:
    return output_passes(ctx, kernels_norm.texture_body)


def _attention(ctx: Context, options: CodegenOptions) -> TextureKernel:
    return output_passes(ctx, kernels_attention.texture_body)


for _kind, _lower in (
    ("elementwise", _elementwise),
    ("reduce", _reduce),
    ("matmul", _matmul),
    ("window", _window),
    ("norm", _norm),
    ("attention", _attention),
):
    registry.register_lowering(_kind, KEY, _lower)


# -- params stored 4 values a texel (the `packed_params` option) -----------------------------

LOAD4 = """float dlc_load4(sampler2D t, int i) {
    int w = textureSize(t, 0).x, p = i >> 2;
    return texelFetch(t, ivec2(p % w, p / w), 0)[i & 3];
}
"""
TEXEL4 = """vec4 dlc_texel4(sampler2D t, int p) {
    int w = textureSize(t, 0).x;
    return texelFetch(t, ivec2(p % w, p / w), 0);
}
"""


def packable_params(plan: Plan, options: CodegenOptions | Mapping | None = None) -> frozenset[str]:
    """The params of a training step's plan that can be stored 4 values a texel (RGBA32F,
    element i in texel i / 4) with the `packed_params` option: each is written only by the
    output pass of an 8 x 4 packed matmul (WebGL2: `_quad`; a weight update fused into the
    weight gradient's epilogue, as SGD's), its last dim a multiple of 4, and not copied after
    the kernels. Such an update then renders 4 values a fragment (a quarter of the fragments)
    and reads the old value as its own texel."""
    o = codegen_options(options).with_(es=True, packed_params=frozenset())
    dims = dim_index(plan)
    g = plan.fusion.graph
    copied = {name for name, _ in plan.copies}
    writers: dict[str, list[bool]] = {}
    for kernel in plan.fusion.kernels:
        ctx = Context(plan.fusion, plan, kernel, dims, renderer=GLSLESTexture(), keys=(KEY,))
        quad = kernel.kind == "matmul" and _packs(ctx, o) and texture_matmul._quad(ctx, True)
        for t in kernel.outputs:
            slot = plan.slot_of.get(t)
            if slot is None or plan.slots[slot].kind != "param":
                continue
            shape = tuple(g.nodes[t].shape)
            fits = quad and shape == tuple(kernel.shape) and isinstance(shape[-1], int) and shape[-1] % 4 == 0
            writers.setdefault(plan.slots[slot].name, []).append(fits)
    return frozenset(name for name, fits in writers.items() if all(fits) and name not in copied)


def packed_loads(ctx: Context, rendered: TextureKernel, names: frozenset) -> TextureKernel:
    """The kernel's passes reading the params of `names` as stored 4 values a texel
    (`dlc_load4`); a pass writing one must render vec4s (texture_matmul._unpack4_pass)."""
    units = {u: ctx.plan.slots[s].name for s, u in ctx.binding.items() if _is_packed(ctx, s, names)}
    passes = []
    for p in rendered.passes:
        slot = ctx.plan.slot_of.get(p.tensor) if p.tensor is not None else None
        if slot is not None and _is_packed(ctx, slot, names) and "out vec4 dlc_out4;" not in p.source:
            raise AssertionError(
                f"kernel {ctx.kernel.name}: a pass writes packed param '{ctx.plan.slots[slot].name}'"
                " one value a fragment"
            )
        text = p.source
        for u, name in units.items():
            text = text.replace(f"dlc_load(b{u}, ", f"dlc_load4(b{u}, ")
            text = text.replace(f"uniform sampler2D b{u};  // ", f"uniform sampler2D b{u};  // (4 values a texel) ", 1)
            allowed = (
                f"dlc_load4(b{u}, ",
                f"dlc_texel4(b{u}, ",
                f"texelFetch(b{u}, ivec2(0), 0)",
                f"texelFetch(b{u}, ivec2(gl_FragCoord.xy), 0)",
            )
            rest = re.sub(r"//.*", "", text)  # (the IR comments name params such as b1)
            for a in allowed:
                rest = rest.replace(a, "")
            if re.search(rf"\bb{u}\b", rest.replace(f"uniform sampler2D b{u};", "")):
                raise AssertionError(
                    f"kernel {ctx.kernel.name}: packed param '{name}' (unit {u}) is read other than by element"
                )
        helpers = ctx.renderer.helpers  # dlc_load: dropped where no load is left to use it
        if text.count("dlc_load(") == 1 and helpers.strip() and helpers in text:
            text = text.replace(helpers, "", 1)
        for name, helper in (("dlc_load4(", LOAD4), ("dlc_texel4(", TEXEL4)):
            if name in text:
                text = text.replace("void main() {", helper + "\nvoid main() {", 1)
        passes.append(replace(p, source=text))
    return replace(rendered, passes=tuple(passes))


def _is_packed(ctx: Context, slot: int, names: frozenset) -> bool:
    s = ctx.plan.slots[slot]
    return s.kind == "param" and s.name in names


def _split(ctx: Context) -> bool:
    """Whether this kernel is a sum/max/min over many (or symbolically many) elements."""
    k, g = ctx.kernel, ctx.graph
    if k.kind != "reduce" or g.nodes[k.anchor].op not in ("sum", "max", "min"):
        return False
    axes, _ = geometry(ctx)
    xshape = g.nodes[g.nodes[k.anchor].inputs[0]].shape
    reduced = numel_known(tuple(xshape[a] for a in axes))
    return reduced is None or reduced > SPLIT


def _partials_pass(ctx: Context) -> str:
    """The first pass of a split reduction: fragment p = o * PARTS + part."""
    em = Emitter(ctx)
    n = ctx.numel(ctx.kernel.shape)
    em.own_element("p", mul(n, str(PARTS)))
    em.line(f"int o = p / {PARTS}, part = p % {PARTS};")
    what = reduce_body(ctx, em, "part", str(PARTS)) + f", {PARTS} partials per output"
    em.line(ctx.renderer.store("partials", "p", "acc"))  # element p of the scratch texture
    return finish(ctx, em, None, what)


def _combine_body(ctx: Context, em: Emitter, unit: int) -> str:
    """The second pass of a split reduction: output o combines its PARTS partials."""
    op = ctx.graph.nodes[ctx.kernel.anchor].op
    em.line(f"float acc = {INIT[op]};")
    em.open(f"for (int q = 0; q < {PARTS}; ++q)")
    em.line(f"float v = {ctx.load(f'b{unit}', f'o * {PARTS} + q')};")
    em.line("acc += v;" if op == "sum" else f"acc = (v {BETTER[op]} acc || isnan(v)) ? v : acc;")
    em.close()
    if op == "sum":
        # Overflowed, or a term is inf or NaN (rare): the partials times 2^-32, and a part whose
        # partial is inf or NaN (its sum may have overflowed where the whole does not) summed
        # again from its terms times 2^-32: within RESCAN elements an output, as llvmpipe ends
        # a fragment's loops after 65535 iterations in all.
        n_red = ctx.numel(_reduced_shape(ctx))
        em.open("if (!dlc_isfinite(acc))")
        em.line("float down = 0.0;")
        em.open(f"for (int q = 0; q < {PARTS}; ++q)")
        em.line(f"float v = {ctx.load(f'b{unit}', f'o * {PARTS} + q')};")
        em.open(f"if (dlc_isfinite(v) || {n_red} > {RESCAN})")
        em.line("down += dlc_down32(v);")
        em.line("continue;")
        em.close()
        _reduce_loop(ctx, em, "down", "q", str(PARTS), scaled=True)
        em.close()
        em.line(f"acc = down * {UP};")
        em.close()
    return f"{op}: combine {PARTS} partials per output"


def _reduced_shape(ctx: Context) -> tuple:
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xshape = ctx.graph.nodes[node.inputs[0]].shape
    return tuple(xshape[a] for a in geometry(ctx)[0])


def _reduce_loop(ctx: Context, em: Emitter, acc: str, start: str, step: str, scaled: bool = False) -> None:
    """The loop of output o over its reduced elements from `start` by `step` into `acc` (and
    `best`); scaled: a sum of the terms times 2^-32."""
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    op, x = node.op, node.inputs[0]
    xshape = g.nodes[x].shape
    axes, keepdims = geometry(ctx)
    red_shape = tuple(xshape[a] for a in axes)
    kept = [a for a in range(len(xshape)) if a not in axes]
    oc = em.coords(Ix(flat="o"), node.shape)
    r = em.names.claim("r")
    em.open(
        f"for (int {r} = {start}; {r} < {ctx.numel(red_shape)}; " + (f"++{r})" if step == "1" else f"{r} += {step})")
    )
    rc = em.coords(Ix(flat=r), red_shape)
    coords = [""] * len(xshape)
    for j, a in enumerate(kept):
        coords[a] = oc[a] if keepdims else oc[j]
    for j, a in enumerate(axes):
        coords[a] = rc[j]
    v = em.value(x, Ix(multi=tuple(coords)))
    if op == "sum":
        em.line(f"{acc} += {f'dlc_down32({v})' if scaled else v};")
    elif op in ("argmax", "argmin"):
        em.line(f"if ({v} {BETTER[op]} {acc} || (isnan({v}) && !isnan({acc}))) {{ {acc} = {v}; best = {r}; }}")
    else:
        em.line(f"{acc} = ({v} {BETTER[op]} {acc} || isnan({v})) ? {v} : {acc};")
    em.close()


def reduce_body(ctx: Context, em: Emitter, start: str = "0", step: str = "1") -> str:
    """One fragment per output, looping over the reduced elements (acc_result = the result);
    a split reduction's first pass loops from `start` by `step`."""
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    op = node.op
    xshape = g.nodes[node.inputs[0]].shape
    axes, _ = geometry(ctx)
    em.line(f"float acc = {INIT[op]};")
    em.line("int best = 0;")
    _reduce_loop(ctx, em, "acc", start, step)
    if op == "sum" and start == "0":  # a split's partials are checked where they are combined
        # Overflowed, or a term is inf or NaN (rare): again with the terms times 2^-32.
        em.open("if (!dlc_isfinite(acc))")
        em.line("float down = 0.0;")
        _reduce_loop(ctx, em, "down", start, step, scaled=True)
        em.line(f"acc = down * {UP};")
        em.close()
    em.line(f"float acc_result = {'float(best)' if op in ('argmax', 'argmin') else 'acc'};")
    return f"{op} over axes {list(axes)} of {list(xshape)}, one fragment per output"


def matmul_body(ctx: Context, em: Emitter) -> str:
    """One fragment per output: a dot product over k with texelFetch."""
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    a, b = node.inputs
    ash, bsh = g.nodes[a].shape, g.nodes[b].shape
    ta, tb = bool(node.attr("ta")), bool(node.attr("tb"))
    kdim = ash[-2] if ta else ash[-1]
    oc = em.coords(Ix(flat="o"), node.shape)
    i, j = oc[-2], oc[-1]
    batch = oc[:-2]

    def batch_of(shape) -> tuple[str, ...]:
        # an operand's own batch coordinates: the output's, broadcast onto its batch dims
        return broadcast_coords(batch, node.shape[:-2], shape[:-2])

    em.line("float acc = 0.0;")
    em.open(f"for (int kk = 0; kk < {ctx.dim(kdim)}; ++kk)")
    av = em.value(a, Ix(multi=(*batch_of(ash), *(("kk", i) if ta else (i, "kk")))))
    bv = em.value(b, Ix(multi=(*batch_of(bsh), *((j, "kk") if tb else ("kk", j)))))
    em.line(f"acc += {av} * {bv};")
    em.close()
    return f"matmul {list(ash)}{'^T' if ta else ''} @ {list(bsh)}{'^T' if tb else ''}, one fragment per output"
