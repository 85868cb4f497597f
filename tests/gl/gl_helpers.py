"""Helpers of the GL tests: a matmul graph with an optional fused epilogue, and the driver's
verdict on a fragment shader."""

from __future__ import annotations

from dlc.compiler.builder import GraphBuilder


def matmul_graph(a_shape, b_shape, ta: bool, tb: bool, epilogue: bool = True):
    """(graph, output node): a (transposed with `ta`) @ w (`tb`), then relu(. + bias) when
    `epilogue` (inputs "a", "w", "bias")."""
    b = GraphBuilder()
    a, w = b.input("a", a_shape), b.input("w", b_shape)
    y = b.add("matmul", [a, w], ta=ta, tb=tb)
    if epilogue:
        bias = b.input("bias", (b.shape(y)[-1],))
        y = b.add("relu", [b.add("add", [y, bias])])
    return b.build(), y


def fragment_compile_log(source: str) -> str:
    """ "" when the current GL compiles `source` as a fragment shader, else its error log."""
    from dlc.runtime.gl import GL

    shader = GL.glCreateShader(GL.GL_FRAGMENT_SHADER)
    GL.glShaderSource(shader, source)
    GL.glCompileShader(shader)
    ok = GL.glGetShaderiv(shader, GL.GL_COMPILE_STATUS)
    log = GL.glGetShaderInfoLog(shader)
    GL.glDeleteShader(shader)
    return "" if ok else (log.decode() if isinstance(log, bytes) else str(log))
