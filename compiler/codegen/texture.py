"""The `glsl-texture` target: each kernel output rendered by a fragment shader into a float texture.

For GL without compute shaders (macOS's 4.1, WebGL2): one fragment computes one output element.
Every storage slot is a 2D R32F texture holding the slot's floats row-major from the flat index
(the width is the texture's own, read with `textureSize`); the fragment at (x, y) of the output
texture computes element `y * dlc_width + x`. The same fusion (with this target's
capabilities: one output a kernel), plan, `Emitter` and index algebra as the compute target are
used; the `GLSLTexture` renderer (renderer.py) makes a load `dlc_load(b<k>, i)` (a `texelFetch`,
`b<k>` a sampler on texture unit k), a store `dlc_out = v`, and the own element the fragment's.
A kernel with several outputs renders one pass (one shader) per output.

Reductions, matmuls and window ops are per-output loops (a sum whose plain result is inf or NaN
sums again with its terms times 2^-32, as on the compute target). The version line is `#version 330
core`, or `#version 300 es` with `precision highp` for WebGL2 (the `es` option); the text writes
no implicit int -> float conversion (GLSL ES refuses them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from dlc.runtime.sizes import device_limits, over_limits
from dlc.runtime.spec import Packed, Pass, PassScratch, ProgramSpec

from ..plan import Plan, size_of
from . import dim_index, kernels_attention, kernels_elementwise, kernels_norm, texture_matmul
from .glsl import PREAMBLE, Context, Emitter, Ix, KernelSource, comment, kernel_source, mul, numel_known, uniform_lines
from .index import broadcast_coords
from .kernels_reduce import BETTER, INIT, UP, geometry
from .kernels_window import _BODIES as WINDOW_BODIES
from .options import codegen_options
from .renderer import GLSLESTexture, GLSLTexture, Renderer

VERSION_CORE = GLSLTexture.version
VERSION_ES = GLSLESTexture.version
ES_PRECISION = GLSLESTexture.prefix
LOAD = GLSLTexture.helpers

_SAMPLED = re.compile(r"\bdlc_load\(b(\d+),")
_BUFFER_LOAD = re.compile(r"\bb\d+\.v\[")  # a compute-target load: never in a texture shader


class TextureTargetError(Exception):
    """A kernel the texture target cannot render (names the op and the target)."""


SPLIT = 1024  # a sum/max/min over more (or a symbolic number of) elements runs in two passes
PARTS = 64  # partial results per output in the first of them
RESCAN = 65535 - 2 * PARTS  # a split sum that overflowed sums its parts again up to this size


@dataclass(frozen=True)
class TexturePass:
    tensor: int | None  # the output this pass writes; None: the partials of a split reduction
    source: str
    into: int | None = None  # renders the packed texture on this unit (texture_matmul)


@dataclass(frozen=True)
class TextureKernel:
    """A rendered kernel: what `program_spec` needs (`kernel`, its source empty) and its passes."""

    kernel: KernelSource
    passes: tuple[TexturePass, ...]
    scratch: dict | None = None  # {"size": [int, dims...], "unit": k}: the partials' texture
    packed: tuple = ()  # texture_matmul's RGBA textures: {"unit", "rows", "depth", "label"} each


def render(plan: Plan, options: Mapping | None = None) -> list[TextureKernel]:
    dims = dim_index(plan)
    opts = codegen_options(options)
    packed = True if opts.packed is None else bool(opts.packed)  # texture_matmul's packed passes
    limits = device_limits(opts.limits)
    rendered = [render_kernel(plan, k, dims, opts.es, packed) for k in range(len(plan.fusion.kernels))]
    for t in rendered:  # fusion kept each within the device's texture units (compiler/limits.py)
        for p in t.passes:
            why = over_limits(p.source, None, limits, fragment=True)
            if why:
                raise ValueError(f"internal dlc error: kernel '{t.kernel.name}' {why}")
    return rendered


def render_kernel(
    plan: Plan, index: int, dims: Mapping[str, int], es: bool = False, packed: bool = True
) -> TextureKernel:
    kernel = plan.fusion.kernels[index]
    ctx = Context(plan.fusion, plan, kernel, dims, renderer=GLSLESTexture() if es else GLSLTexture())
    if packed and texture_matmul.applies(ctx):
        return texture_matmul.render_kernel(ctx, es)
    passes = []
    scratch = None
    if _split(ctx):
        # Tree reduction in two passes: PARTS partials per output, then one fragment per
        # output combines them (and runs the epilogue), reading them on a spare texture unit.
        unit = len(ctx.binding)
        size = size_of(ctx.graph.nodes[kernel.anchor].shape)
        scratch = {"size": [size[0] * PARTS, *size[1:]], "unit": unit}
        passes.append(TexturePass(None, _render_pass(ctx, None)))
    for o in kernel.outputs:
        passes.append(TexturePass(o, _render_pass(ctx, o, scratch)))
    ks = kernel_source(ctx, "", {"flat": [1], "per_group": 1}, (1, 1, 1))
    return TextureKernel(ks, tuple(passes), scratch)


def _split(ctx: Context) -> bool:
    """Whether this kernel is a sum/max/min over many (or symbolically many) elements."""
    k, g = ctx.kernel, ctx.graph
    if k.kind != "reduce" or g.nodes[k.anchor].op not in ("sum", "max", "min"):
        return False
    axes, _ = geometry(ctx)
    xshape = g.nodes[g.nodes[k.anchor].inputs[0]].shape
    reduced = numel_known(tuple(xshape[a] for a in axes))
    return reduced is None or reduced > SPLIT


def _render_pass(ctx: Context, output: int | None, scratch: dict | None = None) -> str:
    k, g = ctx.kernel, ctx.graph
    em = Emitter(ctx)
    n = ctx.numel(k.shape)
    if output is None:  # the partials of a split reduction: fragment p = o * PARTS + part
        em.own_element("p", mul(n, str(PARTS)))
        em.line(f"int o = p / {PARTS}, part = p % {PARTS};")
        what = _reduce_body(ctx, em, "part", str(PARTS)) + f", {PARTS} partials per output"
        em.line(ctx.renderer.store("partials", "p", "acc"))  # element p of the scratch texture
        return _finish(ctx, em, None, what)
    if k.kind == "elementwise":
        kernels_elementwise.main_body(em, (output,))
        return _finish(ctx, em, output, "elementwise")
    em.own_element("o", n)
    if scratch is not None:
        what = _combine_body(ctx, em, scratch["unit"])
        em.anchor_value = "acc"
    elif k.kind == "reduce":
        what = _reduce_body(ctx, em)
        em.anchor_value = "acc_result"
    elif k.kind == "matmul":
        what = _matmul_body(ctx, em)
        em.anchor_value = "acc"
    elif k.kind == "norm":
        what = kernels_norm.texture_body(ctx, em)
        em.anchor_value = "acc"
    elif k.kind == "attention":
        what = kernels_attention.texture_body(ctx, em)
        em.anchor_value = "acc"
    elif k.kind == "window":
        op = g.nodes[k.anchor].op
        body = WINDOW_BODIES.get(op)
        if body is None:
            raise TextureTargetError(f"the texture target has no kernel for op '{op}'")
        what = body(ctx, em, g.nodes[k.anchor])
        em.anchor_value = "acc"
    else:
        raise TextureTargetError(f"the texture target has no kernel for {k.kind} kernels")
    em.store_outputs(Ix(flat="o"), (output,))
    return _finish(ctx, em, output, what)


def _finish(ctx: Context, em: Emitter, output: int | None, what: str) -> str:
    main = "\n".join(["void main() {", *em.lines, "}"])
    if _BUFFER_LOAD.search(main):  # a template wrote a load without asking the renderer
        raise AssertionError(f"kernel {ctx.kernel.name}: a storage-buffer load in a texture shader")
    units = sorted({int(m.group(1)) for m in _SAMPLED.finditer(main)})
    from .glsl import prune_preamble  # here, not at the top: this module's imports stay as they are

    # only the helpers the pass uses: the whole preamble is most of the text, and a browser
    # compiles (and SwiftShader translates at the first draw) every function it is given
    return prune_preamble("\n".join(_header(ctx, output, what, units)) + "\n" + main + "\n")


def _header(ctx: Context, output: int, what: str, units: list[int]) -> list[str]:
    g, k = ctx.graph, ctx.kernel
    r: Renderer = ctx.renderer
    lines = r.version_lines()
    out = "partials" if output is None else f"output {g.label(output)}"
    lines += [f"// kernel {k.name}, {comment(out)}: {comment(what)}", "// implements:"]
    lines += ["//   " + comment(text) for text in ctx.ir_lines]
    slot_of = {b: s for s, b in ctx.binding.items()}
    for u in units:
        if u not in slot_of:
            lines.append(f"uniform sampler2D b{u};  // the partial results")
            continue
        names = ", ".join(g.label(t) for t in k.inputs if ctx.plan.slot_of.get(t) == slot_of[u])
        lines.append(f"uniform sampler2D b{u};  // {comment(names)}")
    lines += uniform_lines(ctx)
    lines += [
        "uniform int dlc_width;  // the output texture's width",
        "layout(location = 0) out float dlc_out;",
        "",
        PREAMBLE,
        r.helpers,
    ]
    return lines


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


def _reduce_body(ctx: Context, em: Emitter, start: str = "0", step: str = "1") -> str:
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


def _matmul_body(ctx: Context, em: Emitter) -> str:
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


def program(name: str, plan: Plan, kernels: list[TextureKernel]) -> tuple[ProgramSpec, dict[str, str]]:
    """The program spec (as `pipeline.program_spec`, with target "texture" and each kernel's
    passes) and its shader files."""
    from ..pipeline import program_spec

    spec, _ = program_spec(name, plan, [t.kernel for t in kernels])
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
    return replace(spec, target="texture", kernels=tuple(texture_kernels)), sources
