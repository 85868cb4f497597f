"""Which GL target runs a program: "compute" (GLSL 4.30 compute shaders over storage buffers)
or "texture" (GLSL 3.30 fragment shaders over float textures, for GL without compute: macOS,
and Mesa told to drop compute).

Order: an explicit request (`Session(target=...)`, `--target`), then env `DLC_TARGET`, then
the context: compute where it has compute shaders, texture where it has not.
"""

from __future__ import annotations

import os

from .device import get_context
from .errors import RuntimeFailure

TARGETS = ("compute", "texture")


def choose_target(requested: str | None = None) -> tuple[str, str]:
    """(target, why). Raises RuntimeFailure for an unknown name, or compute without compute."""

    if requested is not None:
        source = "asked for"
        name = requested
    elif os.environ.get("DLC_TARGET", "").strip():
        source = "DLC_TARGET"
        name = os.environ["DLC_TARGET"].strip()
    else:
        source = None
        name = ""
    name = name.lower()
    if source is not None and name not in TARGETS:
        raise RuntimeFailure(f"unknown GL target '{name}' ({source}): use one of {', '.join(TARGETS)}")
    ctx = get_context()
    if source is None:
        if ctx.has_compute:
            return "compute", "the context has compute shaders"
        return "texture", "the context has no compute shaders"
    if name == "compute" and not ctx.has_compute:
        raise RuntimeFailure(
            f"the compute target was {source}, but this OpenGL context "
            f"({ctx.version}) has no compute shaders: use target texture"
        )
    return name, f"{source}" if source != "DLC_TARGET" else "DLC_TARGET is set"
