"""The device limits a kernel must respect, as fusion and codegen see them.

The GL backend passes its context's limits (`runtime.context`'s `limits` dict) as the codegen
option `limits`; compiling with no context (`dlc compile`, an artifact) takes `SPEC_MINIMUMS`,
the least every conforming device gives, so that what is compiled offline runs anywhere.
`capabilities` turns them into what fusion needs (`fusion.Capabilities`): how many stored
tensors one kernel may bind on the target, after the bindings codegen adds itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlc.runtime.sizes import SPEC_MINIMUMS, device_limits

from .fusion import Capabilities

__all__ = ["SPEC_MINIMUMS", "capabilities", "device_limits"]

# Bindings a kernel's template adds after its stored tensors, by kernel kind: on compute, a
# matmul may declare vec4 views of both operands (each a storage block of its own) and a
# split-K scratch buffer, a reduction its split scratch (vec4 views of a matmul's outputs
# are dropped by codegen where they do not fit: codegen/__init__.py); on the texture
# target, a split reduction reads its partials on one more unit and the packed matmul and
# conv passes sample three more textures.
RESERVED = {
    "compute": (("elementwise", 0), ("reduce", 1), ("matmul", 3), ("window", 3)),
    "texture": (("elementwise", 0), ("reduce", 1), ("matmul", 4), ("window", 4)),
}


def capabilities(target: str, limits: Mapping[str, Any] | None = None, nan_flags: bool = False) -> Capabilities:
    """What one kernel may do on `target` ("compute" or "texture") of a device with `limits`
    (None: the spec minimums); debug mode's NaN flags take one more storage block."""
    lim = device_limits(limits)
    debug = 1 if nan_flags else 0
    if target == "texture":
        # Samplers only: outputs are render targets. A fragment writes one result (see
        # renderer.GLSLTexture), whatever the draw buffers.
        units = int(lim["max_texture_units"])
        return Capabilities(max_bindings=units, max_outputs=1, outputs_bind=False, reserve=RESERVED["texture"])
    blocks = min(int(lim["max_compute_ssbo_blocks"]), int(lim["max_ssbo_bindings"])) - debug
    return Capabilities(
        max_bindings=blocks, max_outputs=max(1, blocks // 2), outputs_bind=True, reserve=RESERVED["compute"]
    )
