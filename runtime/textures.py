"""Float textures as storage for the texture target: 2D R32F textures, laid out row-major from
the flat index, written by rendering into a framebuffer and read back with glReadPixels.

`layout(n)` picks the texture size for n floats under the context's MAX_TEXTURE_SIZE;
`Texture` uploads, downloads and renders into itself; `render_pass` runs a full-screen
triangle (from gl_VertexID, an empty VAO bound, as core profiles require).
"""

from __future__ import annotations

import numpy as np

from .device import get_context
from .elements import storage_floats
from .errors import RuntimeFailure
from .gl import GL
from .program import ShaderError, error_line


def max_texture_size() -> int:
    return int(get_context().limits["max_texture_size"])


def layout(count: int, what: str = "a tensor") -> tuple[int, int]:
    """(width, height) holding `count` floats; RuntimeFailure naming `what` when too big."""
    limit = max_texture_size()
    count = max(int(count), 1)
    width = min(count, limit)
    height = -(-count // width)
    if height > limit:
        raise RuntimeFailure(
            f"{what} needs {count} floats, more than a {limit}x{limit} texture "
            f"holds (this context's MAX_TEXTURE_SIZE is {limit})"
        )
    return width, height


_FORMATS = {1: ("GL_R32F", "GL_RED"), 4: ("GL_RGBA32F", "GL_RGBA")}


def packed_layout(rows: int, depth: int, what: str) -> tuple[int, int]:
    """(width, height) of a packed matmul operand (texture_matmul): `rows` rows of
    ceil(depth / 4) RGBA texels, one row down each column, in bands as wide as the context
    allows; RuntimeFailure naming `what` when too big."""
    limit = max_texture_size()
    width = max(min(rows, limit), 1)
    height = max(-(-rows // width), 1) * max(-(-depth // 4), 1)
    if height > limit:
        raise RuntimeFailure(
            f"{what} needs {-(-rows // width)} bands of {-(-depth // 4)} texels, more than a "
            f"{limit}x{limit} texture holds (this context's MAX_TEXTURE_SIZE is {limit})"
        )
    return width, height


class Texture:
    """An R32F texture of `count` floats (at least), with its framebuffer; with `channels=4`
    an RGBA32F one of `count` texels (texture_matmul's packed operands); `size` (width,
    height) in place of the row-major layout."""

    def __init__(self, count: int, what: str = "a tensor", channels: int = 1, size: tuple[int, int] | None = None):
        self.width, self.height = size or layout(count, what)
        self.channels = channels
        internal, self._format = (getattr(GL, name) for name in _FORMATS[channels])
        self.handle = int(GL.glGenTextures(1))
        GL.glBindTexture(GL.GL_TEXTURE_2D, self.handle)
        GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MIN_FILTER, GL.GL_NEAREST)
        GL.glTexParameteri(GL.GL_TEXTURE_2D, GL.GL_TEXTURE_MAG_FILTER, GL.GL_NEAREST)
        GL.glTexImage2D(GL.GL_TEXTURE_2D, 0, internal, self.width, self.height, 0, self._format, GL.GL_FLOAT, None)
        self.fbo = int(GL.glGenFramebuffers(1))
        GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, self.fbo)
        GL.glFramebufferTexture2D(GL.GL_FRAMEBUFFER, GL.GL_COLOR_ATTACHMENT0, GL.GL_TEXTURE_2D, self.handle, 0)
        status = GL.glCheckFramebufferStatus(GL.GL_FRAMEBUFFER)
        if status != GL.GL_FRAMEBUFFER_COMPLETE:
            self.delete()
            kind = _FORMATS[channels][0][3:]
            raise RuntimeFailure(
                f"this OpenGL cannot render into {kind} textures (framebuffer status 0x{int(status):x})"
            )

    @property
    def count(self) -> int:
        """Floats it holds (texels for a packed texture: each holds `channels` floats)."""
        return self.width * self.height

    @property
    def capacity(self) -> int:
        """Bytes (as `Buffer.capacity`: memory reports add them up)."""
        return self.nbytes

    @property
    def nbytes(self) -> int:
        return 4 * self.channels * self.count

    def upload(self, array) -> None:
        """The floats of `array` (for a packed texture, `channels` a texel), zeros after."""
        data = storage_floats(array).ravel()  # an i32 tensor's ints by their bits
        floats = self.count * self.channels
        if data.size > floats:
            raise RuntimeFailure(f"internal dlc error: {data.size} floats into a texture of {floats}")
        full = np.zeros(floats, np.float32)
        full[: data.size] = data
        GL.glBindTexture(GL.GL_TEXTURE_2D, self.handle)
        GL.glPixelStorei(GL.GL_UNPACK_ALIGNMENT, 4)
        GL.glTexSubImage2D(GL.GL_TEXTURE_2D, 0, 0, 0, self.width, self.height, self._format, GL.GL_FLOAT, full)

    def download(self, count: int | None = None) -> np.ndarray:
        """The first `count` texels' floats (default all), `channels` a texel."""
        count = self.count if count is None else int(count)
        rows = max(-(-count // self.width), 1) if count else 0
        if rows == 0:
            return np.zeros(0, np.float32)
        GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, self.fbo)
        GL.glPixelStorei(GL.GL_PACK_ALIGNMENT, 4)
        out = np.empty(rows * self.width * self.channels, np.float32)
        GL.glReadPixels(0, 0, self.width, rows, self._format, GL.GL_FLOAT, out)
        return out[: count * self.channels].copy()

    def delete(self) -> None:
        if self.handle:
            GL.glDeleteFramebuffers(1, [self.fbo])
            GL.glDeleteTextures([self.handle])
            self.handle = 0


VERTEX = """#version 330 core
// dlc runtime: a triangle covering the viewport, from gl_VertexID alone
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) << 2), float((gl_VertexID & 2) << 1)) - 1.0;
    gl_Position = vec4(p, 0.0, 1.0);
}
"""

_vao = 0
_vertex = 0


def _compile(kind: int, source: str, name: str) -> int:
    shader = GL.glCreateShader(kind)
    GL.glShaderSource(shader, source)
    GL.glCompileShader(shader)
    if not GL.glGetShaderiv(shader, GL.GL_COMPILE_STATUS):
        log = GL.glGetShaderInfoLog(shader)
        log = log.decode(errors="replace") if isinstance(log, bytes) else str(log)
        GL.glDeleteShader(shader)
        numbered = "\n".join(f"{i + 1:4d}  {line}" for i, line in enumerate(source.splitlines()))
        raise ShaderError(
            f"internal dlc error: the texture shader '{name}' does not compile:\n{log.strip()}\n{numbered}",
            name,
            log,
            error_line(log),
            source,
        )
    return shader


class FragmentProgram:
    """A linked full-screen-triangle program around one fragment shader."""

    def __init__(self, source: str, name: str):
        global _vertex
        get_context()
        if not _vertex:
            _vertex = _compile(GL.GL_VERTEX_SHADER, VERTEX, "dlc_vertex")
        frag = _compile(GL.GL_FRAGMENT_SHADER, source, name)
        handle = GL.glCreateProgram()
        GL.glAttachShader(handle, _vertex)
        GL.glAttachShader(handle, frag)
        GL.glLinkProgram(handle)
        GL.glDetachShader(handle, frag)
        GL.glDeleteShader(frag)
        if not GL.glGetProgramiv(handle, GL.GL_LINK_STATUS):
            log = GL.glGetProgramInfoLog(handle)
            GL.glDeleteProgram(handle)
            log = log.decode(errors="replace") if isinstance(log, bytes) else str(log)
            raise ShaderError(
                f"internal dlc error: the texture shader '{name}' does not link: {log.strip()}", name, log, None, source
            )
        self.handle = int(handle)
        self.name = name
        self.source = source
        self._locations: dict[str, int] = {}
        self.units: list[int] = []  # texture units its samplers read (set by the executor)

    def location(self, name: str) -> int:
        loc = self._locations.get(name)
        if loc is None:
            loc = self._locations[name] = int(GL.glGetUniformLocation(self.handle, name))
        return loc

    def delete(self) -> None:
        if self.handle:
            GL.glDeleteProgram(self.handle)
            self.handle = 0


def render_pass(
    program: FragmentProgram,
    target: Texture,
    samplers: dict[int, Texture],
    ints: dict[str, int],
    floats: dict[str, float] | None = None,
) -> None:
    """Run `program` over every texel of `target`: sampler b<k> reads `samplers[k]` (unit k)."""
    global _vao
    if not _vao:
        _vao = int(GL.glGenVertexArrays(1))
    if target.handle in {t.handle for t in samplers.values()}:
        raise RuntimeFailure(f"internal dlc error: pass '{program.name}' reads the texture it writes")
    units = get_context().limits["max_texture_units"]
    if samplers and max(samplers) >= units:
        raise RuntimeFailure(
            f"kernel pass '{program.name}' reads {max(samplers) + 1} textures; "
            f"this GPU's fragment shaders read at most {units}"
        )
    GL.glUseProgram(program.handle)
    for unit, tex in samplers.items():
        GL.glActiveTexture(GL.GL_TEXTURE0 + unit)
        GL.glBindTexture(GL.GL_TEXTURE_2D, tex.handle)
        loc = program.location(f"b{unit}")
        if loc >= 0:
            GL.glUniform1i(loc, unit)
    for name, value in ints.items():
        loc = program.location(name)
        if loc >= 0:
            GL.glUniform1i(loc, int(value))
    for name, value in (floats or {}).items():
        loc = program.location(name)
        if loc >= 0:
            GL.glUniform1f(loc, float(value))
    GL.glBindFramebuffer(GL.GL_FRAMEBUFFER, target.fbo)
    GL.glViewport(0, 0, target.width, target.height)
    GL.glDisable(GL.GL_BLEND)
    GL.glDisable(GL.GL_DEPTH_TEST)
    GL.glBindVertexArray(_vao)
    GL.glDrawArrays(GL.GL_TRIANGLES, 0, 3)


COPY = """#version 330 core
// dlc runtime: copy dlc_count floats between textures of any layout
uniform sampler2D b0;
uniform int dlc_width;
uniform int dlc_count;
layout(location = 0) out float dlc_out;
void main() {
    int o = int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x);
    int w = textureSize(b0, 0).x;
    dlc_out = o < dlc_count ? texelFetch(b0, ivec2(o % w, o / w), 0).r : 0.0;
}
"""

_copy: FragmentProgram | None = None


def copy(dst: Texture, src: Texture, count: int | None = None) -> None:
    """Copy the first `count` floats (default all of `src`) of `src` into `dst`."""
    global _copy
    if _copy is None or not _copy.handle:
        _copy = FragmentProgram(COPY, "dlc_copy")
    n = src.count if count is None else int(count)
    render_pass(_copy, dst, {0: src}, {"dlc_width": dst.width, "dlc_count": n})
