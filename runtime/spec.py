"""The program spec: everything the runtime needs to run one compiled program, typed.

The compiler (`compiler/codegen/program.py` `program_spec`, each target's `render`)
builds a `ProgramSpec`; the executors (`runtime/executor.py`, `runtime/texture_executor.py`),
the eager arrays (`dlc/gl_eager.py`) and debug mode (`dlc/debug.py`) read the same objects.
manifest.json holds each program in the JSON layout below; `to_json` / `from_json` here are
the only code that writes or reads that layout (`manifest_json` writes a whole manifest,
`runtime/manifest.py` validates a parsed one, then `programs_from_json` types its programs).

    slots     the storage: kind (temp, input, param, state, const), sizes as products of a
              constant and symbolic dims, the leaf's name, a const's values
    tensors   id -> (slot, shape, label) of every tensor the plan placed
    kernels   in launch order: GLSL file, bindings (binding i <- slot), int uniforms (dim
              names), work-group grid (compute) or render passes (texture), reads, writes,
              the kernels it runs after, the inputs it reads, its IR lines and their locations
    inplace / copies   the training step's updates (param or state <- tensor)

All dataclasses are frozen and their mappings read-only: one spec may be shared by many
executors. Free of GL and of the compiler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

FORMAT = 1  # the program spec and manifest layout this dlc writes and reads

Size = tuple  # (constant factor, dim name, ...): their product


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


def _size(z) -> Size:
    return (int(z[0]), *(str(d) for d in z[1:]))


def _shape(s) -> tuple:
    return tuple(d if isinstance(d, str) else int(d) for d in s)


@dataclass(frozen=True)
class Grid:
    """A compute kernel's work groups: `flat` (a size, `per_group` items each; a split
    reduction also cuts each output's reduction into chunks: `split` = (size, chunk)) or
    `tiles` (x, y, z: (size, tile) each). `scratch`: words of scratch per (output, chunk) or
    per split-K tile element (0: no scratch buffer)."""

    flat: Size | None = None
    per_group: int = 1
    split: tuple[Size, int] | None = None
    tiles: tuple[tuple[Size, int], ...] | None = None
    scratch: int = 0

    @classmethod
    def from_json(cls, g: Mapping) -> Grid:
        scratch = int(g.get("scratch", 0))
        if "tiles" in g:
            return cls(tiles=tuple((_size(z), int(t)) for z, t in g["tiles"]), scratch=scratch)
        split = (_size(g["split"][0]), int(g["split"][1])) if "split" in g else None
        return cls(flat=_size(g["flat"]), per_group=int(g["per_group"]), split=split, scratch=scratch)

    def to_json(self) -> dict:
        if self.tiles is not None:
            out: dict = {"tiles": [[list(z), t] for z, t in self.tiles]}
        else:
            out = {"flat": list(self.flat or (1,)), "per_group": self.per_group}
            if self.split is not None:
                out["split"] = [list(self.split[0]), self.split[1]]
        if self.scratch:
            out["scratch"] = self.scratch
        return out


@dataclass(frozen=True)
class Pass:
    """A texture kernel's render pass: its .frag file and the tensor it renders (None: a
    two-pass reduction's partials, into the kernel's scratch texture)."""

    file: str
    tensor: int | None
    into: int | None = None  # renders the kernel's packed texture on this unit (texture_matmul)

    def to_json(self) -> dict:
        out = {"file": self.file, "tensor": self.tensor}
        if self.into is not None:
            out["into"] = self.into
        return out


@dataclass(frozen=True)
class Packed:
    """A texture kernel's RGBA32F texture (texture_matmul: an operand packed 4 values of k a
    texel, or the products): `rows` rows of ceil(depth / 4) texels, read at `unit`."""

    unit: int
    rows: Size
    depth: Size
    label: str = ""  # what it holds, for errors

    def to_json(self) -> dict:
        return {"unit": self.unit, "rows": list(self.rows), "depth": list(self.depth), "label": self.label}


@dataclass(frozen=True)
class PassScratch:
    """A texture kernel's partials texture: its size and the texture unit it is read at."""

    size: Size
    unit: int

    def to_json(self) -> dict:
        return {"size": list(self.size), "unit": self.unit}


@dataclass(frozen=True)
class Kernel:
    """One kernel of a program, in launch order."""

    name: str
    slots: tuple[int, ...]  # binding i <- slot
    uniforms: Mapping[str, str]  # int uniform -> the dim it holds
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    after: tuple[int, ...]  # the kernels whose outputs it reads
    inputs: tuple[str, ...]  # the program inputs it reads
    ir: tuple[str, ...]  # the IR lines it implements (debug mode reports them)
    locs: tuple[tuple | None, ...]  # (file, line, column) of each, or None
    kind: str | None = None  # what fusion made it (elementwise, matmul, ...)
    file: str | None = None  # compute: its GLSL file
    grid: Grid | None = None  # compute
    local_size: tuple[int, int, int] | None = None  # compute
    scalars: Mapping[str, str] = field(default_factory=dict)  # eager: float uniform -> number input
    nan_flags: tuple[int, ...] = ()  # debug mode: the node whose NaN sets each flag
    passes: tuple[Pass, ...] = ()  # texture
    scratch: PassScratch | None = None  # texture: a two-pass reduction's partials
    packed: tuple[Packed, ...] = ()  # texture: texture_matmul's RGBA textures

    def __post_init__(self) -> None:
        object.__setattr__(self, "uniforms", _frozen(self.uniforms))
        object.__setattr__(self, "scalars", _frozen(self.scalars))

    @classmethod
    def from_json(cls, k: Mapping) -> Kernel:
        return cls(
            name=k["name"],
            slots=tuple(int(s) for s in k["slots"]),
            uniforms=k["uniforms"],
            reads=tuple(k["reads"]),
            writes=tuple(k["writes"]),
            after=tuple(k["after"]),
            inputs=tuple(k["inputs"]),
            ir=tuple(k["ir"]),
            locs=tuple(tuple(x) if x else None for x in k["locs"]),
            kind=k.get("kind"),
            file=k.get("file"),
            grid=Grid.from_json(k["grid"]) if "grid" in k else None,
            local_size=tuple(k["local_size"]) if "local_size" in k else None,
            scalars=k.get("scalars", {}),
            nan_flags=tuple(k.get("nan_flags", ())),
            passes=tuple(Pass(p["file"], p["tensor"], p.get("into")) for p in k.get("passes", ())),
            scratch=PassScratch(_size(k["scratch"]["size"]), int(k["scratch"]["unit"])) if "scratch" in k else None,
            packed=tuple(
                Packed(int(q["unit"]), _size(q["rows"]), _size(q["depth"]), q.get("label", ""))
                for q in k.get("packed", ())
            ),
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.name}
        if self.file is not None:
            out["file"] = self.file
        if self.kind is not None:
            out["kind"] = self.kind
        out["slots"] = list(self.slots)
        out["uniforms"] = dict(self.uniforms)
        if self.scalars:
            out["scalars"] = dict(self.scalars)
        if self.grid is not None:
            out["grid"] = self.grid.to_json()
        if self.local_size is not None:
            out["local_size"] = list(self.local_size)
        out.update(
            reads=list(self.reads),
            writes=list(self.writes),
            after=list(self.after),
            inputs=list(self.inputs),
            ir=list(self.ir),
            locs=[list(x) if x else None for x in self.locs],
        )
        if self.nan_flags:
            out["nan_flags"] = list(self.nan_flags)
        if self.passes:
            out["passes"] = [p.to_json() for p in self.passes]
        if self.scratch is not None:
            out["scratch"] = self.scratch.to_json()
        if self.packed:
            out["packed"] = [q.to_json() for q in self.packed]
        return out


@dataclass(frozen=True)
class Slot:
    """A storage slot: `sizes` (each a Size) are the tensors it holds over the program; it
    must fit the largest. Input, param and state slots name their leaf; const slots hold
    their values."""

    kind: str  # temp, input, param, state, const
    sizes: tuple[Size, ...]
    name: str | None = None
    values: tuple[float, ...] | None = None

    @classmethod
    def from_json(cls, s: Mapping) -> Slot:
        values = tuple(s["values"]) if s.get("values") is not None else None
        return cls(s["kind"], tuple(_size(z) for z in s["sizes"]), s.get("name"), values)

    def to_json(self) -> dict:
        out: dict[str, Any] = {"kind": self.kind, "sizes": [list(z) for z in self.sizes]}
        if self.name is not None:
            out["name"] = self.name
        if self.values is not None:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives: its slot, its (symbolic) shape and the label errors name it by."""

    slot: int
    shape: tuple
    label: str


@dataclass(frozen=True)
class Update:
    """A training update: persistent leaf `target` (param or optimizer state) <- `tensor`."""

    target: str
    tensor: int


@dataclass(frozen=True)
class ProgramSpec:
    """One compiled program: its storage, tensors and kernel launches."""

    name: str
    dims: tuple[str, ...]  # the symbolic dims, in uniform order
    slots: tuple[Slot, ...]
    tensors: Mapping[int, TensorInfo]
    roots: tuple[int, ...]  # what it computes (a training step: its loss first)
    kernels: tuple[Kernel, ...]
    producer: Mapping[int, int]  # tensor -> the kernel that writes it
    fetch: Mapping[str, int] = field(default_factory=dict)  # root label -> tensor
    inplace: tuple[Update, ...] = ()  # updates the kernels write in place
    copies: tuple[Update, ...] = ()  # updates copied after the kernels
    ref_dims: Mapping[str, int] = field(default_factory=dict)  # the dims the plan was sized for
    target: str = "compute"  # "compute" or "texture"
    peak_bytes: int | None = None
    format: int = FORMAT

    def __post_init__(self) -> None:
        for name in ("tensors", "producer", "fetch", "ref_dims"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @classmethod
    def from_json(cls, p: Mapping, name: str | None = None) -> ProgramSpec:
        """The spec from its manifest.json layout (validated first: runtime/manifest.py)."""
        return cls(
            name=p.get("name", name or "?"),
            dims=tuple(p["dims"]),
            slots=tuple(Slot.from_json(s) for s in p["slots"]),
            tensors={
                int(t): TensorInfo(int(i["slot"]), _shape(i["shape"]), i["label"]) for t, i in p["tensors"].items()
            },
            roots=tuple(p["roots"]),
            kernels=tuple(Kernel.from_json(k) for k in p["kernels"]),
            producer={int(t): int(k) for t, k in p["producer"].items()},
            fetch=p.get("fetch", {}),
            inplace=tuple(Update(c["target"], c["tensor"]) for c in p.get("inplace", ())),
            copies=tuple(Update(c["target"], c["tensor"]) for c in p.get("copies", ())),
            ref_dims=p.get("ref_dims", {}),
            target=p.get("target", "compute"),
            peak_bytes=p.get("peak_bytes"),
            format=p["format"],
        )

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "format": self.format,
            "name": self.name,
            "target": self.target,
            "dims": list(self.dims),
            "ref_dims": dict(self.ref_dims),
            "slots": [s.to_json() for s in self.slots],
            "tensors": {
                str(t): {"slot": i.slot, "shape": list(i.shape), "label": i.label} for t, i in self.tensors.items()
            },
            "roots": list(self.roots),
            "fetch": dict(self.fetch),
            "producer": {str(t): k for t, k in self.producer.items()},
            "kernels": [k.to_json() for k in self.kernels],
            "inplace": [{"target": c.target, "tensor": c.tensor} for c in self.inplace],
            "copies": [{"target": c.target, "tensor": c.tensor} for c in self.copies],
        }
        if self.peak_bytes is not None:
            out["peak_bytes"] = self.peak_bytes
        return out


def manifest_json(manifest: Mapping) -> str:
    """manifest.json's text for `manifest` (its "programs" values ProgramSpecs)."""
    data = {**manifest, "programs": {n: p.to_json() for n, p in manifest["programs"].items()}}
    return json.dumps(data, indent=1) + "\n"


def programs_from_json(manifest: Mapping) -> dict:
    """A validated parsed manifest with its programs typed (ProgramSpec each; typed ones stay)."""
    target = manifest.get("target", "compute")  # artifacts from before targets are compute
    programs = {
        n: p if isinstance(p, ProgramSpec) else ProgramSpec.from_json({"target": target, **p}, n)
        for n, p in manifest["programs"].items()
    }
    return {**manifest, "programs": programs}
