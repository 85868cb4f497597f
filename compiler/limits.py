"""The device limits a kernel must respect, as fusion and codegen see them.

The GL backend passes its context's limits (`runtime.context`'s `limits` dict) as the codegen
option `limits`; compiling with no context (`dlc compile`, an artifact) takes `SPEC_MINIMUMS`,
the least every conforming device gives, so that what is compiled offline runs anywhere.
`capabilities` turns them into what fusion needs (`fusion.Capabilities`): how many stored
tensors one kernel may bind on the target, after the bindings codegen adds itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlc.runtime.sizes import SPEC_MINIMUMS, device_limits

__all__ = ["SPEC_MINIMUMS", "Capabilities", "capabilities", "device_limits"]


@dataclass(frozen=True)
class Capabilities:
    """What a target lets one kernel do, as fusion needs to know it (`limits.capabilities`
    makes them from a device's limits, or from the spec minimums when compiling with no
    context): `max_bindings`, the resources one shader may bind (storage blocks on compute,
    texture units on the texture target), of which `reserve` keeps, per kernel kind, those
    its template adds itself; stored inputs, and outputs where `outputs_bind`, take the rest.
    `max_outputs`: the results one invocation writes together. A target whose invocation
    writes one result (a fragment shader: one pass per output, each recomputing the kernel)
    gets kernels of one output: a fetch or update is not written by its readers' kernel, and
    consumers are not folded into their producer's kernel."""

    max_bindings: int = 8
    max_outputs: int = 4
    outputs_bind: bool = True
    reserve: tuple[tuple[str, int], ...] = ()

    def budget(self, kind: str) -> int:
        """The stored tensors a kernel of `kind` may bind."""
        return self.max_bindings - dict(self.reserve).get(kind, 0)

    def fits(self, kind: str, inputs: Iterable[int], outputs: Sequence[int]) -> bool:
        """Whether a kernel of `kind` reading `inputs` (bases) and writing `outputs` fits."""
        bound = set(inputs) | (set(outputs) if self.outputs_bind else set())
        return len(bound) <= self.budget(kind) and len(outputs) <= self.max_outputs


# Bindings a kernel's template adds after its stored tensors, by kernel kind: on compute, a
# matmul may declare vec4 views of both operands (each a storage block of its own) and a
# split-K scratch buffer, a reduction its split scratch (vec4 views of a matmul's outputs
# are dropped by codegen where they do not fit: codegen/__init__.py); on the texture
# target, a split reduction reads its partials on one more unit (attention_cached its
# scores) and the packed matmul and conv passes sample three more textures.
RESERVED = {
    "compute": (("elementwise", 0), ("reduce", 1), ("matmul", 3), ("window", 3)),
    "texture": (("elementwise", 0), ("reduce", 1), ("matmul", 4), ("window", 4), ("cached_attention", 1)),
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
