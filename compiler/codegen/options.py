"""Codegen options: one frozen dataclass instead of an untyped mapping.

Every knob a kernel template reads lives here with its default. Callers may still pass a
plain mapping (`{"nan_flags": True}`, `{"es": True}`): `codegen_options` turns it into
`CodegenOptions` and refuses a key that is no option, naming the ones there are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class CodegenOptions:
    nan_flags: bool = False  # debug mode: kernels flag each node that makes a NaN
    es: bool = False  # texture target: GLSL ES 3.00 (WebGL2) instead of GLSL 3.30
    packed: bool | None = None  # texture target: packed matmul/conv passes (texture_matmul.py); None: on
    # texture target (WebGL2): params stored 4 values a texel (RGBA32F, element i in texel i / 4),
    # read so by every kernel and written so by their updates (texture_matmul.packable_params)
    packed_params: frozenset = frozenset()
    vec4: bool = True  # elementwise kernels may move vec4s
    elementwise_local: int = 256  # elementwise work-group size
    matmul: str | None = None  # a matmul variant by name (kernels_matmul.choose); None: chosen by shape
    blocking: tuple | None = None  # a matmul blocking (kernels_matmul.Blocking fields)
    prefetch: bool | None = None  # matmul: prefetch the next K-slab (None: the tuning table's choice)
    device: str | None = None  # GL_RENDERER: picks the matmul tuning table's row (matmul_tuning.py)
    limits: Mapping | None = None  # the device's limits (a context's); None: the spec minimums (limits.py)
    matmul_variant: Mapping | None = None  # matmul switches forced over the table's choice
    conv: str | None = None  # conv2d: "gemm" or "direct"; None: chosen by shape
    conv_blocking: tuple | Mapping | None = None  # conv as implicit GEMM: its blocking, or a variant
    conv_split: int | None = None  # conv filter gradient: split-K chunk
    gather_chunk: int | None = None  # gather_grad: positions a split work group sums (0: no split; None: by size)
    attention_unroll: bool | None = None  # attention kernels: rows and words written out (None: by size)
    attention_tile: int | None = None  # attention kernels: floats of the streamed tiles (TILE_FLOATS)
    attention_rows: int | None = None  # attention kernels: a work group's own rows (None: by size)
    # attention gradients: register tiles where the head allows (None or True: on, a mapping:
    # the tiling, kernels_attention_tiled.Tiling's fields; False: the row layout)
    attention_tiled: bool | Mapping | None = None

    def with_(self, **changes: Any) -> CodegenOptions:
        """A copy with `changes` (e.g. `options.with_(nan_flags=True)`)."""
        return replace(self, **changes)


NAMES = tuple(f.name for f in fields(CodegenOptions))


def codegen_options(options: CodegenOptions | Mapping | None) -> CodegenOptions:
    """`options` as CodegenOptions (None: the defaults; a mapping: its keys as fields)."""
    if options is None:
        return CodegenOptions()
    if isinstance(options, CodegenOptions):
        return options
    if not isinstance(options, Mapping):
        raise TypeError(f"codegen options must be CodegenOptions or a mapping, not {type(options).__name__}")
    unknown = sorted(str(k) for k in options if k not in NAMES)
    if unknown:
        raise ValueError(f"unknown codegen option {', '.join(map(repr, unknown))}: choose from {', '.join(NAMES)}")
    return CodegenOptions(**options)
