"""What the texture target's passes share: a pass and a kernel of passes, and a fragment
shader's text around its main() (the header: version, the IR comment, samplers, uniforms,
the output, the preamble and the texture load helper).

texture.py (the target and its per-output passes) and texture_matmul.py (the packed matmul
and conv passes) both build on this module, so neither imports the other's internals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .glsl import PREAMBLE, Context, Emitter, KernelSource, comment, prune_preamble, uniform_lines
from .renderer import Renderer

# a load of element i, or (GLSLESTexture) of element 0 without dlc_load's division
# (dlc_texel4: a texel of a param stored 4 values a texel, texture.LOAD4)
_SAMPLED = re.compile(r"\bdlc_(?:load|texel4)\(b(\d+),|\btexelFetch\(b(\d+), ivec2\(0\), 0\)")
_BUFFER_LOAD = re.compile(r"\bb\d+\.v\[")  # a compute-target load: never in a texture shader


@dataclass(frozen=True)
class TexturePass:
    tensor: int | None  # the output this pass writes; None: the partials of a split reduction
    source: str
    into: int | None = None  # renders the packed texture on this unit (texture_matmul)


@dataclass(frozen=True)
class TextureKernel:
    """A rendered kernel: what the program spec needs (`kernel`, its source empty) and its passes."""

    kernel: KernelSource
    passes: tuple[TexturePass, ...]
    scratch: dict | None = None  # {"size": [int, dims...], "unit": k}: the partials' texture
    packed: tuple = ()  # texture_matmul's RGBA textures: {"unit", "rows", "depth", "label"} each


def finish(ctx: Context, em: Emitter, output: int | None, what: str) -> str:
    """A pass's shader: the header, then main() of the Emitter's lines."""
    main = "\n".join(["void main() {", *em.lines, "}"])
    if _BUFFER_LOAD.search(main):  # a template wrote a load without asking the renderer
        raise AssertionError(f"kernel {ctx.kernel.name}: a storage-buffer load in a texture shader")
    units = sorted({int(m.group(1) or m.group(2)) for m in _SAMPLED.finditer(main)})
    # only the preamble's helpers the pass uses, as on compute: less for a browser to compile
    return prune_preamble("\n".join(header(ctx, output, what, units)) + "\n" + main + "\n")


def header(ctx: Context, output: int | None, what: str, units: list[int]) -> list[str]:
    """A pass's lines before main(): `output` None for a pass into a scratch or packed texture."""
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
