"""The program spec: everything the runtime needs to run one compiled program, typed.

The compiler (`compiler/codegen/program.py` `program_spec`, each target's `render`)
builds a `ProgramSpec`; the executors (`runtime/executor.py`, `runtime/texture_executor.py`),
the eager arrays (`dlc/backends/gl_eager.py`) and debug mode (`dlc/debug.py`) read the same objects.
manifest.json holds each program in the JSON layout below; `to_json` / `from_json` here are
the only code that writes or reads that layout (`manifest_json` writes a whole manifest,
`runtime/artifact/manifest.py` validates a parsed one, then `programs_from_json` types its programs).

    slots     the storage: kind (temp, input, param, state, const), sizes as products of a
              constant and symbolic dims, the leaf's name, a const's values
    tensors   id -> (slot, shape, label) of every tensor the plan placed
    kernels   in launch order: GLSL file, bindings (binding i <- slot), int uniforms (dim
              names), work-group grid (compute) or render passes (texture), reads, writes,
              the kernels it runs after, the inputs it reads, its IR lines and their locations
    inplace / copies   the training step's updates (param or state <- tensor)

The dataclasses' annotations are the layout's schema: `check_json` checks a parsed program's
keys and field types against them (an optional field's null is its absence, in `from_json`
too), and the manifest validator adds only what a type cannot say.

All dataclasses are frozen and their mappings read-only: one spec may be shared by many
executors. Free of GL and of the compiler.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import Any

FORMAT = 1  # the program spec and manifest layout this dlc writes and reads
SLOT_KINDS = ("temp", "input", "param", "state", "const")
PERSISTENT = ("param", "state")  # slots that are leaves kept across runs, not planned storage
LR = "$lr"  # the learning rate, fed to the train program as an input

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
        if g.get("tiles") is not None:  # null, as the checker reads it, is absence
            return cls(tiles=tuple((_size(z), int(t)) for z, t in g["tiles"]), scratch=scratch)
        split = (_size(g["split"][0]), int(g["split"][1])) if g.get("split") is not None else None
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
    # renders the kernel's packed texture on this unit (texture_matmul)
    into: int | None = field(default=None, metadata={"is": "a packed unit of the kernel (tensor null)"})

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
    locs: tuple[tuple[str, int, int] | None, ...]  # (file, line, column) of each, or None
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
        scratch = k.get("scratch")
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
            grid=Grid.from_json(k["grid"]) if k.get("grid") is not None else None,
            local_size=tuple(k["local_size"]) if k.get("local_size") is not None else None,
            scalars=k.get("scalars", {}),
            nan_flags=tuple(k.get("nan_flags", ())),
            passes=tuple(Pass(p["file"], p["tensor"], p.get("into")) for p in k.get("passes", ())),
            scratch=PassScratch(_size(scratch["size"]), int(scratch["unit"])) if scratch is not None else None,
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
    peak_bytes: Mapping[str, int] | None = None  # bytes of temporaries planned and with no reuse, of leaves by kind
    format: int = FORMAT

    def __post_init__(self) -> None:
        for name in ("tensors", "producer", "fetch", "ref_dims"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @classmethod
    def from_json(cls, p: Mapping, name: str | None = None) -> ProgramSpec:
        """The spec from its manifest.json layout (validated first: runtime/artifact/manifest.py)."""
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


@functools.cache  # asked for every object of every manifest a fuzz test reads
def required_keys(cls: type) -> tuple[str, ...]:
    """The keys an object of `cls`'s JSON layout must have: its fields without a default, in
    order (each field is written under its own name). The manifest's validator asks this, so
    that which keys exist is said once, here."""
    return tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)


def json_kind(v) -> str:
    """A JSON value's kind, for messages."""
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def show(v) -> str:
    """A value, shortened for a message."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_json(v, cls: type, where: str, fail: Callable[[str, str], None], required=None) -> dict:
    """Check that parsed JSON `v` is an object of `cls`'s layout, and so every spec object inside
    it: each has its required keys (`required_keys`; `required` overrides them for `v` itself)
    and each field it has is of the field's annotated type. A field's metadata "is" words its
    type error as what the field is. Unknown keys are left alone; ranges, lengths and cross
    references are the caller's. `fail(field, problem)` raises."""
    if not isinstance(v, dict):
        fail(where, f"must be an object, not {json_kind(v)}")
    for key in required_keys(cls) if required is None else required:
        if key not in v:
            fail(where, f"the key '{key}' is missing")
    for key, hint, what in _json_fields(cls):
        if key in v:
            _check_type(v[key], hint, f"{where}.{key}", fail if what is None else _as_what(fail, v[key], what))
    return v


@functools.cache
def _json_fields(cls: type) -> tuple[tuple[str, Any, str | None], ...]:
    """(JSON key, resolved annotation, metadata "is") of each field of `cls`, in order."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.metadata.get("is")) for f in fields(cls))


def _as_what(fail, v, what: str):
    return lambda field, problem: fail(field, f"{show(v)} is not {what}")


def _check_type(v, hint, where: str, fail) -> None:
    """`v` is JSON of the Python type `hint`: tuples are lists, Mappings and dataclasses
    objects (an int-keyed Mapping has its keys as strings, which the caller checks)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if v is None and type(None) in args:
            return
        (hint,) = [a for a in args if a is not type(None)]  # the spec's unions are `X | None`
        _check_type(v, hint, where, fail)
    elif is_dataclass(hint):
        check_json(v, hint, where, fail)
    elif origin is Mapping:
        if not isinstance(v, dict):
            fail(where, f"must be an object, not {json_kind(v)}")
        for key, x in v.items():
            _check_type(x, args[1], f"{where}.{key if len(key) <= 60 else key[:57] + '...'}", fail)
    elif hint is tuple or origin is tuple:
        if not isinstance(v, list):
            fail(where, f"must be a list, not {json_kind(v)}")
        if args and args[-1] is Ellipsis:  # tuple[X, ...]
            for i, x in enumerate(v):
                _check_type(x, args[0], f"{where}[{i}]", fail)
        elif args:  # tuple[X, Y]: a list of exactly these
            if len(v) != len(args):
                fail(where, f"has {len(v)} entries, not {len(args)}")
            for i, (x, a) in enumerate(zip(v, args)):
                _check_type(x, a, f"{where}[{i}]", fail)
    elif hint is int:
        if type(v) is not int:
            fail(where, f"must be an integer, not {json_kind(v)}")
    elif hint is float:
        if type(v) not in (int, float) or not math.isfinite(v):
            fail(where, f"must be a finite number, not {show(v)}")
    elif hint is str:
        if not isinstance(v, str):
            fail(where, f"must be a string, not {json_kind(v)}")
    else:
        raise TypeError(f"{where}: the spec's type {hint} has no JSON layout")
