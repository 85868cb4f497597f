"""Renderers: what differs between GLSL targets, as tables on one class per target.

In the manner of tinygrad's `CStyleLanguage` (and its old `GLSLLanguage` for WebGL): the
`Emitter` (glsl.py) writes a kernel's values and index maps once, and asks its renderer how to
read element i of a stored tensor, how to write a result, how an invocation finds its own
element and what the version line is (an op's expression is the registry's lowering for the
target's keys: a target that needs another writes it there). Each target (target.py) holds a
subclass that fills those tables.

- `GLSLCompute`: GLSL 4.30 compute shaders over std430 storage buffers (`b<k>.v[i]`).
- `GLSLTexture`: GLSL 3.30 core fragment shaders over R32F textures (`texelFetch` from the
  flat index; one fragment writes one element of one output, `dlc_out`).
- `GLSLESTexture`: the same as GLSL ES 3.00 for WebGL2 (its version line and precisions).
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from typing import ClassVar


def float_lit(v: float) -> str:
    """A float constant as GLSL text (NaN and infinities through the preamble's defines)."""
    v = float(v)
    if math.isnan(v):
        return "DLC_NAN"
    if math.isinf(v) or abs(v) > 3.4028234663852886e38:  # above float32's max (which is finite)
        return "DLC_INF" if v > 0 else "(-DLC_INF)"
    text = repr(v)
    if "." not in text and "e" not in text:
        text += ".0"
    return f"({text})" if v < 0 else text


_OPERAND = re.compile(r"\b[abc]\b")


class Renderer(ABC):
    """The tables every GLSL target fills (see the module docstring)."""

    target: ClassVar[str]
    version: ClassVar[str]  # the version line
    prefix: ClassVar[tuple[str, ...]] = ()  # lines right after it (precision qualifiers)
    helpers: ClassVar[str] = ""  # target functions after the preamble (kept only when used)
    shifts: ClassVar[bool] = False  # an index divided by a literal power of two as a shift

    def version_lines(self) -> list[str]:
        return [self.version, *self.prefix]

    def op(self, name: str, glsl: str, args: list[str], attrs: tuple = ()) -> str:
        """The expression of elementwise op `name` over `args` (operands a, b, c of its GLSL
        template `glsl`, the registry's lowering for this target); numeric attrs fill `{attr}`."""
        names = dict(zip("abc", args))
        expr = _OPERAND.sub(lambda m: names[m.group(0)], glsl)
        for k, v in attrs:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                expr = expr.replace("{" + k + "}", float_lit(v))
        return expr

    @abstractmethod
    def load(self, buf: str, index: str) -> str:
        """Element `index` (a flat int expression) of the stored tensor named `buf`."""

    @abstractmethod
    def store(self, buf: str, index: str, value: str) -> str:
        """The statement writing `value` at element `index` of `buf`."""

    @abstractmethod
    def global_index(self) -> str:
        """This invocation's own element of a one-per-element kernel."""

    @abstractmethod
    def bounds_check(self, var: str, count: str) -> str:
        """The statement that ends an invocation whose element `var` is past `count`."""


class GLSLCompute(Renderer):
    target = "compute"
    version = "#version 430"

    def load(self, buf: str, index: str) -> str:
        return f"{buf}.v[{index}]"

    def store(self, buf: str, index: str, value: str) -> str:
        return f"{buf}.v[{index}] = {value};"

    def group_index(self) -> str:
        """This work group's number on a 3D grid of groups."""
        return "int((gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x)"

    def global_index(self) -> str:
        # The runtime wraps a long row of groups onto y and z to stay within the device's limits.
        return f"{self.group_index()} * int(gl_WorkGroupSize.x) + int(gl_LocalInvocationID.x)"

    def bounds_check(self, var: str, count: str) -> str:
        return f"if ({var} >= {count}) return;"


class GLSLTexture(Renderer):
    target = "texture"
    version = "#version 330 core"
    # Inputs are samplers on texture units. A fragment writes one result: a kernel of several
    # outputs would render a pass per output, each computing the whole kernel again (its
    # matmul or reduction too), so fusion makes one-output kernels (limits.capabilities).
    helpers = """\
// Element i of a texture laid out row-major from the flat index.
float dlc_load(sampler2D t, int i) {
    int w = textureSize(t, 0).x;
    return texelFetch(t, ivec2(i % w, i / w), 0).r;
}
"""

    def load(self, buf: str, index: str) -> str:
        return f"dlc_load({buf}, {index})"

    def store(self, buf: str, index: str, value: str) -> str:
        # A fragment writes only its own element, of the one output its pass renders.
        return f"dlc_out = {value};"

    def global_index(self) -> str:
        return "int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x)"

    def bounds_check(self, var: str, count: str) -> str:
        # Fragments past the end of the tensor (the last texture row's tail) write a zero.
        return f"if ({var} >= {count}) {{ dlc_out = 0.0; return; }}"


class GLSLESTexture(GLSLTexture):
    version = "#version 300 es"
    prefix = ("precision highp float;", "precision highp int;", "precision highp sampler2D;")
    # SwiftShader (WebGL2 on the CPU) divides an int by a constant with a division, lane by lane:
    # the shifts made an unpack pass of 1M outputs ~1.2x faster (measured alone, in one page)
    shifts = True

    def load(self, buf: str, index: str) -> str:
        if index == "0":  # (a scalar: the learning rate) no division by the width
            return f"texelFetch({buf}, ivec2(0), 0).r"
        return super().load(buf, index)


COMPUTE = GLSLCompute()
