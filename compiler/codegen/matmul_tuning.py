"""The blocked matmul's tuning choices as data: one table keyed by device family and size class.

A device family is found in the driver's GL_RENDERER string (`family`): "NVIDIA H100",
"NVIDIA H200", "llvmpipe", else "default". The renderer reaches codegen as the codegen option
`device` (the GL backend passes its context's; an artifact compiled without one takes
"default"), so the GLSL is a function of the options alone, and each kernel's header comment
names the family, size class and variant it was rendered with.

Each family's entry holds `wave` (work groups that keep the device busy: fewer tiles than this
take the smaller "split" blocking), `shared_bytes` (shared memory a work group may take),
`short_chunk` (the shortest K-chunk split across work groups where a product has under a
quarter of a wave of tiles; kernels_matmul.split_k_chunk) and,
per size class ("big", "split", "splitk", "narrow", "medium", "thin"; see
kernels_matmul.choose), a variant as a plain literal (None for "splitk": the family has no such
class: its blocking (tm, tn, bk, rm, rn[, ks[, swizzle]]) and the template's switches
(`Variant`). `benchmarks/tune_matmul.py --emit` prints an entry in this form, measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Blocking:
    """A TM x TN output tile per work group, RM x RN outputs per invocation, K-slabs of BK.

    `ks` > 1 splits each K-slab among `ks` groups of invocations inside the work group (more
    invocations per tile when tiles are few), their sums added in shared memory before the
    epilogue. `swizzle` orders the fetch of an operand stored along K so that neighbouring
    invocations store to neighbouring vec4s of shared memory (no bank conflicts)."""

    tm: int
    tn: int
    bk: int
    rm: int
    rn: int
    ks: int = 1
    swizzle: bool = True

    @property
    def group_threads(self) -> int:
        """Invocations that share one K-slice of the tile."""
        return (self.tm // self.rm) * (self.tn // self.rn)

    @property
    def threads(self) -> int:
        return self.group_threads * self.ks

    def problem(self) -> str | None:
        """Why the template cannot render this blocking, or None."""
        if min(self.tm, self.tn, self.bk, self.rm, self.rn, self.ks) < 1:
            return "every size must be positive"
        if self.rm % 4 or self.rn % 4:
            return "rm and rn must be multiples of 4 (outputs are computed as vec4s)"
        if self.tm % self.rm or self.tn % self.rn:
            return "tm and tn must be multiples of rm and rn"
        if self.bk % 4:
            return "bk must be a multiple of 4"
        if self.ks & (self.ks - 1) or self.bk % self.ks:
            return "ks must be a power of 2 dividing bk"
        return None


@dataclass(frozen=True)
class Variant:
    """A blocking and the template's switches (each exact at any size; a switch whose
    precondition fails at the sizes rendered falls back, and the kernel's header says so):

    - `load4`: vec4 loads from global memory where the operand's contiguous axis is a multiple
      of 4 (else one float at a time);
    - `store4`: the epilogue's results stored as vec4s where N is a multiple of 4 and no output
      of the kernel is also read by it (an in-place update), else one float at a time;
    - `double_buffer`: two shared-memory slabs, the next one stored while this one is
      multiplied (one barrier a slab instead of two; twice the shared memory);
    - `warp`: (rows, cols) of invocation tiles that each run of 32 neighbouring invocations
      covers, e.g. (4, 8) or (8, 4) (fewer distinct shared-memory reads a warp); None: rows
      of invocations span the tile's width;
    - `prefetch`: the next K-slab fetched into registers while this one is multiplied;
    - `unroll`: the loop over a K-slab's rows written out (constant shared-memory offsets;
      the attention kernels gained from the same on NVIDIA's compiler);
    - `along_k`: an A stored along K (not transposed: every forward product's activations)
      kept so in shared memory, [m][k / 4], each invocation fetching whole vec4s along K and
      storing them as they are (no 4 x 4 blocks transposed in registers by a few of the
      invocations), and multiplied 4 slab rows at a time (a K-group's share of the slab must
      be a multiple of 4)."""

    blocking: Blocking
    load4: bool = True
    store4: bool = False
    double_buffer: bool = False
    warp: tuple[int, int] | None = None
    prefetch: bool = True
    unroll: bool = False
    along_k: bool = False

    def literal(self) -> dict:
        """The variant as a table entry: the blocking as a tuple, switches that differ from
        the defaults."""
        blk = self.blocking
        out: dict = {"blocking": dataclasses.astuple(blk)[: 7 if not blk.swizzle else 6 if blk.ks > 1 else 5]}
        for f in dataclasses.fields(self):
            if f.name != "blocking" and getattr(self, f.name) != f.default:
                out[f.name] = getattr(self, f.name)
        return out

    def describe(self) -> str:
        """The switches that are on, for kernel headers and benchmark rows."""
        on = [
            name
            for name, flag in (
                ("vec4 loads", self.load4),
                ("vec4 stores", self.store4),
                ("double-buffered", self.double_buffer),
                ("no prefetch", not self.prefetch),
                ("slab loop written out", self.unroll),
                ("A kept along K", self.along_k),
            )
            if flag
        ]
        if self.warp:
            on.append(f"warp {self.warp[0]}x{self.warp[1]}")
        return ", ".join(on) or "plain"


SWITCHES = tuple(f.name for f in dataclasses.fields(Variant) if f.name != "blocking")


def variant(entry: Mapping, where: str = "matmul variant") -> Variant:
    """A Variant from a table entry or a codegen option (`blocking` and switches); a
    mistake is a ValueError naming the key and `where`."""
    unknown = sorted(set(entry) - {"blocking", *SWITCHES})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: blocking, {', '.join(SWITCHES)})")
    if "blocking" not in entry:
        raise ValueError(f"{where}: no 'blocking'")
    blk = entry["blocking"]
    blocking = blk if isinstance(blk, Blocking) else _blocking(blk, where)
    kw = {k: v for k, v in entry.items() if k != "blocking"}
    for k in ("load4", "store4", "double_buffer", "prefetch", "unroll", "along_k"):
        if k in kw and not isinstance(kw[k], bool):
            raise ValueError(f"{where}: {k} must be true or false, not {kw[k]!r}")
    if kw.get("warp") is not None:
        w = kw["warp"]
        if not (isinstance(w, (tuple, list)) and len(w) == 2 and all(isinstance(x, int) and x > 0 for x in w)) or (
            w[0] * w[1] != 32
        ):
            raise ValueError(f"{where}: warp must be (rows, cols) with rows * cols = 32, not {w!r}")
        kw["warp"] = tuple(w)
    return Variant(blocking, **kw)


def _blocking(blk, where: str) -> Blocking:
    if not (isinstance(blk, (tuple, list)) and 5 <= len(blk) <= 7):
        raise ValueError(f"{where}: blocking must be (tm, tn, bk, rm, rn[, ks[, swizzle]]), not {blk!r}")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in blk[:6]):
        raise ValueError(f"{where}: blocking sizes must be integers, not {blk!r}")
    b = Blocking(*blk)
    why = b.problem()
    if why:
        raise ValueError(f"{where}: blocking {tuple(blk)}: {why}")
    return b


# -- the table ---------------------------------------------------------------------------------
# Size classes (kernels_matmul.choose): "big" (both sides >= 128 and tiles enough for a wave),
# "split" (>= 64 a side, 128 rows or more, too few 128x128 tiles), "narrow" (as "split" but
# 64 columns: attention's P @ V over heads of 64), "medium" (>= 64 a side, under 128 rows),
# "thin" (one side under 64 over a long K); "splitk" (optional, None where not measured): a
# "split" or "medium" product without batches that its variant splits across work groups in
# an eighth of a wave of tiles or more (a weight gradient over K = B * T); "shortk" (optional):
# a "big" product over a K of SHORT_K or less (a GPT's projections from 384 channels);
# "fitted" (optional): a "big" or "shortk" product whose class's tile kernels_matmul.fit_tile
# cuts (a fifth of it or more idle: N = 384 under 256-wide tiles), where the "fitted"
# variant's own tile fits it whole.
#
# "default": the choices measured on the lent H200 before the tuning table
# (benchmarks/results/h200_tune*.json): 128x128 tiles with 8x8 outputs and K-slabs of 16 for
# large products (31 TFLOP/s at 4096^3); 128x64 tiles, 8x4, slabs of 32 in 2 K-groups for the
# 1024-sized products of the MLP step (19-28 TFLOP/s); 64x64 with 4x4 under 128 rows;
# 16x16 tiles with 16 K-groups for thin outputs (N = 10 classes) over a long K.
# The NVIDIA rows start as those measurements; benchmarks/tune_matmul.py --emit prints a
# measured replacement to paste.
_H200_MEASURED = {
    "wave": 128,
    "shared_bytes": 49152,
    "short_chunk": 1024,  # as SPLIT_CHUNK: llvmpipe's MLP step lost 12% with 256
    "big": {"blocking": (128, 128, 16, 8, 8)},
    "split": {"blocking": (128, 64, 32, 8, 4, 2)},
    "narrow": {"blocking": (128, 64, 32, 8, 4, 2)},  # as "split": not measured apart
    "medium": {"blocking": (64, 64, 32, 4, 4)},
    "thin": {"blocking": (16, 16, 64, 4, 4, 16)},
    "splitk": None,  # not measured: such products take "split" or "medium"
    "shortk": None,  # not measured: such products take "big"
    "fitted": None,  # not measured: such products take their class's blocking, its tile cut
}

# Measured by `benchmarks/tune_matmul.py` on an H100 80GB HBM3 (2026-11-23): 4096^3 at
# 32.9 TFLOP/s (66% of cuBLAS fp32; the old choice 31.9), the MLP products 1.02x the old
# choice; "medium" kept, not measured.
_H100_MEASURED = {
    "wave": 128,
    "shared_bytes": 49152,
    "short_chunk": 256,
    "big": {"blocking": (128, 256, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    "split": {"blocking": (64, 128, 32, 4, 8, 2), "store4": True, "double_buffer": True, "warp": (4, 8)},
    # benchmarks/bench_matmul_gpt.py --variants (2026-11-25): P @ V and dV of the GPT step,
    # 384 x [256, 256] x [256, 64], 0.245 / 0.226 ms against 0.388 / 0.316 for "split"'s tiles
    "narrow": {"blocking": (128, 64, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    "medium": {"blocking": (64, 64, 32, 4, 4)},
    "thin": {"blocking": (16, 16, 64, 4, 4, 16), "double_buffer": True},
    # .devtree probes on the lent H200 (2026-12-01), the GPT's weight gradients over K = 16384
    # against "split"'s 64x128 tiles: [1536, 384] 0.670 -> 0.525 ms, [384, 1536] 0.667 ->
    # 0.522, [1152, 384] 0.595 -> 0.436 (cuBLAS 0.430, 0.439, 0.457); [384, 384] (9 tiles)
    # lost (0.20 -> 0.29), hence the eighth of a wave
    "splitk": {"blocking": (128, 128, 16, 8, 8), "warp": (4, 8), "unroll": True},
    # .devtree probes on the lent H200 (2026-12-02), the same call twice: the GPT's forward
    # products over K = 384 gained from vec4 stores ([BT, 384] x [384, 1536] 0.702 -> 0.657
    # ms, [BT, 384] x [384, 1152] 0.579 -> 0.548), 4096^3 lost (4.22 -> 4.46), K = 1152 and
    # 1536 lost 1-2%: the epilogue is a larger share of a short K
    "shortk": {"blocking": (128, 256, 16, 8, 8), "store4": True, "double_buffer": True, "warp": (4, 8)},
    "fitted": None,  # not measured on the H100
}

# The H200's fitted and shortk rows (measured below, at the table's H200 entry): 128x192 tiles
# over slabs of 32, vec4 stores, the slab loop written out, an A stored along K kept so.
_H200_ALONG_K_192 = {"blocking": (128, 192, 32, 8, 8), "store4": True, "warp": (4, 8), "unroll": True, "along_k": True}

TABLE: dict[str, dict] = {
    "default": {**_H200_MEASURED, "shared_bytes": 32768},  # GL's minimum maximum
    "NVIDIA H100": _H100_MEASURED,
    # benchmarks/tune_matmul.py on the lent H200 (2026-12-01) chose the H100's row for every
    # class it measured (big 128x256 double-buffered: 4096^3 at 32.5 TFLOP/s, 67% of cuBLAS;
    # the old H200 row's 128x128: 31.5): same chip, same shared memory
    "NVIDIA H200": {
        **_H100_MEASURED,
        # probes on the lent H200 (2026-12-02, benchmarks/probe_matmul.py beside cuBLAS): products
        # whose 256-wide tile is cut to 192 for N = 384 ran faster single-buffered over slabs
        # of 32: [BT, 1536] x [1536, 384] 0.804 -> 0.652 ms (cuBLAS 0.452), [BT, 1152] x
        # [1152, 384] 0.606 -> 0.498, [BT, 384] x [384, 384] 0.215 -> 0.193, the same with B
        # transposed 1.104 -> 0.809; uncut products lost with it ([BT, 384] x [384, 1536]
        # 0.649 -> 0.710 as 128x256, 4096^3 4.21 -> 4.88 as 128x192)
        #
        # probes on the lent H200 (2026-12-02, eleventh session, probe_matmul.py beside cuBLAS):
        # an A stored along K kept so in shared memory (`along_k`) with the slab loop written
        # out, ms: [BT, 1536] x [1536, 384] 0.654 -> 0.533 (cuBLAS 0.448), [BT, 1152] x
        # [1152, 384] 0.499 -> 0.411, [BT, 384] x [384, 384] 0.194 -> 0.171, [BT, 1536] x
        # [384, 1536]^T 0.808 -> 0.701; the same switches on the shortk row: [BT, 384] x [384,
        # 1536] 0.650 -> 0.573, x [1536, 384]^T 0.764 -> 0.629; on "big" (vec4 stores
        # off): 4096^3 4.220 -> 3.823 (cuBLAS 2.787; 128x128 tiles over slabs of 32 took
        # 3.791, but would leave N = 384 uncut, off the fitted row's 0.533 for 0.581).
        # A second call: the fitted row with vec4 stores as well, 0.531 -> 0.523, 0.411 ->
        # 0.399, 0.170 -> 0.151, and as the shortk row [BT, 384] x [384, 1536] 0.574 (128x256
        # tiles as above) -> 0.535 ([384, 1152]: 0.478 -> 0.457 without vec4 stores)
        "fitted": _H200_ALONG_K_192,
        "shortk": _H200_ALONG_K_192,
        "big": {
            "blocking": (128, 256, 16, 8, 8),
            "double_buffer": True,
            "warp": (4, 8),
            "unroll": True,
            "along_k": True,
        },
    },
    # llvmpipe (Mesa's CPU renderer, the test suite's): the default choices; 32 KiB of shared
    # memory a work group there.
    "llvmpipe": {**_H200_MEASURED, "shared_bytes": 32768},
}
CLASSES = ("big", "split", "splitk", "narrow", "medium", "thin", "shortk", "fitted")
OPTIONAL = ("splitk", "shortk", "fitted")  # classes a family's row may hold None for
SHORT_K = 512  # "shortk": a "big" product over a K known at compile time up to this
FAMILIES = tuple(f for f in TABLE if f != "default")


def family(device: str | None) -> str:
    """The table's family for a GL_RENDERER string (case-insensitive substring), else
    "default"."""
    if device:
        low = device.lower()
        for f in FAMILIES:
            if f.lower() in low:
                return f
    return "default"


def entry(device: str | None) -> dict:
    return TABLE[family(device)]


def lookup(device: str | None, size_class: str) -> Variant | None:
    """The variant the table holds for `size_class` on `device` (a renderer string or None);
    None for an optional class ("splitk") the family has not measured."""
    fam = family(device)
    held = TABLE[fam][size_class]
    return None if held is None else variant(held, f"matmul tuning table[{fam!r}][{size_class!r}]")
