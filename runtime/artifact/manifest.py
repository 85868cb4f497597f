"""manifest.json of a compiled artifact, checked whole before anything trusts it.

An artifact folder is untrusted input: it may be old, hand-edited, truncated or hostile.
`read_manifest` reads manifest.json (bounded, confined to the folder), parses it strictly and
`validate`s it. It touches no GL and reads no other file, so it is cheap enough to run on
thousands of fuzzed manifests. Every problem is an `ArtifactError` naming the manifest and the
field:

    model.dlc/manifest.json: programs.eval.kernels[3].file: '../x' leaves the artifact folder

Derived from the typed program spec (runtime/spec.py `check_json`, run on each program first):
every program object's required keys and the type of every field it has (int, finite number,
string, list of X, [X, Y] of fixed length, object, null for an optional field), walking into
the spec objects inside it (slots, tensors, kernels, grids, passes, updates), so that the
schema of a program is said once, by its dataclasses' annotations.

Hand-written here, because a type cannot say them:
  - the manifest's own top level (inputs, params, states, names, losses, train), which is no
    spec dataclass;
  - ranges (slot and kernel indices, element counts, work-group sizes), size limits (list and
    string lengths, MAX_*), the format version;
  - names: identifiers, dim names and canonical dim products, leaf names, file names confined
    to the folder (`check_file_name`);
  - cross references the runtime follows: tensor ids, slots that must hold their tensors,
    kernels' bindings, `after`, inputs and uniforms, updates' targets, the target's own fields.

Checking the shader texts and the .npz files against the manifest is files.py's job.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping

from .. import dims as dim_algebra
from ..errors import DataError
from ..sizes import MAX_NAME
from ..spec import (  # the layout runtime/spec.py reads and writes
    FORMAT,
    LR,
    PERSISTENT,
    SLOT_KINDS,
    ProgramSpec,
    check_json,
    required_keys,
)
from ..spec import json_kind as _what
from ..spec import show as _show

MANIFEST = "manifest.json"
PROGRAMS = ("eval", "outputs", "train")
OUTPUTS = "outputs"  # the program of the model's outputs alone, and the manifest key naming them

# Bounds: generous for real models, small enough that nothing derived from them is absurd.
MAX_MANIFEST_BYTES = 64 << 20
MAX_ELEMENTS = 2**31 - 1  # element counts: the kernels' index math is 32-bit
MAX_RANK = 32
MAX_LEAF = 2 * MAX_NAME + 1  # a state's name: a param's name, '$', the state's ('W$m')
MAX_BINDINGS = 64  # buffers per kernel
MAX_LOCAL_SIZE = 1024

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # GLSL-safe: uniforms, dims, kernel names
# Leaves (inputs, params, optimizer state such as 'W1$m' and '$t', '$lr'): model names, dotted
# ('h.3.attn.w': segments of letters, digits and _, never empty, so no '..' or '/'), joined by '$'.
_MODEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*"
LEAF = re.compile(rf"\$?{_MODEL_NAME}(\${_MODEL_NAME})*\Z")
# A file inside the artifact folder: one plain name, no separators, no leading dot.
FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")


class ArtifactError(DataError):
    """A compiled artifact that is malformed or tampered with: names the file and the field."""


def parse(raw: bytes, where: str):
    """JSON as the writer writes it: UTF-8, no NaN or Infinity, no repeated keys."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{where}: not UTF-8 text (byte {e.start})") from None

    def no_constant(name):
        raise ValueError(f"{name} is not JSON")

    def no_repeats(pairs):
        out = {}
        for k, v in pairs:
            if k in out:
                raise ValueError(f"key '{k[:MAX_NAME]}' appears twice in one object")
            out[k] = v
        return out

    try:
        return json.loads(text, parse_constant=no_constant, object_pairs_hook=no_repeats)
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{where}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:
        raise ArtifactError(f"{where}: not valid JSON: {e}") from None
    except RecursionError:
        raise ArtifactError(f"{where}: not valid JSON: nested too deeply") from None


def validate(m, where: str) -> None:
    """Check a parsed manifest against the schema; ArtifactError names the first problem."""
    _Manifest(where).check(m)


# -- the checks ---------------------------------------------------------------------------------
class _Manifest:
    """One validation: `where` is the manifest's path for messages."""

    def __init__(self, where: str):
        self.where = where
        self.input_dims: set[str] = set()

    def fail(self, field: str, problem: str):
        raise ArtifactError(f"{self.where}: {field}: {problem}")

    # -- typed fields ----------------------------------------------------------------------
    def typed(self, v, cls: type, field: str, required=None) -> dict:
        """An object of the spec's dataclass `cls`: its keys and field types, derived (spec.py)."""
        return check_json(v, cls, field, self.fail, required)

    def obj(self, v, field: str, required=(), optional=()) -> dict:
        if not isinstance(v, dict):
            self.fail(field, f"must be an object, not {_what(v)}")
        for key in required:
            if key not in v:
                self.fail(field, f"the key '{key}' is missing")
        return v

    def list(self, v, field: str, max_len: int = 1 << 20) -> list:
        if not isinstance(v, list):
            self.fail(field, f"must be a list, not {_what(v)}")
        if len(v) > max_len:
            self.fail(field, f"has {len(v)} entries; at most {max_len} are allowed")
        return v

    def int(self, v, field: str, lo: int = 0, hi: int = MAX_ELEMENTS) -> int:
        if type(v) is not int:
            self.fail(field, f"must be an integer, not {_what(v)}")
        if not lo <= v <= hi:
            self.fail(field, f"{_show(v)} is out of range ({lo} to {hi})")
        return v

    def number(self, v, field: str) -> float:
        if type(v) not in (int, float) or not math.isfinite(v):
            self.fail(field, f"must be a finite number, not {_show(v)}")
        return v

    def str(self, v, field: str, max_len: int = 1 << 16) -> str:
        if not isinstance(v, str):
            self.fail(field, f"must be a string, not {_what(v)}")
        if len(v) > max_len:
            self.fail(field, f"is {len(v)} characters long; at most {max_len} are allowed")
        return v

    def name(self, v, field: str, pattern=IDENT, what: str = "an identifier") -> str:
        self.str(v, field, MAX_NAME)
        if not pattern.match(v):
            self.fail(field, f"{_show(v)} is not {what}")
        return v

    def leaf(self, v, field: str) -> str:
        self.str(v, field, MAX_LEAF)
        if not LEAF.match(v):
            self.fail(field, f"{_show(v)} is not a tensor name")
        if any(len(part) > MAX_NAME for part in v.split("$")):
            self.fail(field, f"has a name over {MAX_NAME} characters long")
        return v

    def member(self, v, options, field: str, what: str):
        if not isinstance(v, str) or v not in options:
            self.fail(field, f"{_show(v)} is not {what}")
        return v

    def shape(self, v, field: str, dims=None) -> tuple:
        """[int | dim name, ...]; `dims`: the dim names allowed (default any identifier)."""
        self.list(v, field, MAX_RANK)
        fixed = 1
        for i, d in enumerate(v):
            if isinstance(d, str):
                self.dim(d, f"{field}[{i}]", dims)
            else:
                fixed *= self.int(d, f"{field}[{i}]")
        if fixed > MAX_ELEMENTS:
            self.fail(field, f"{fixed} elements; at most {MAX_ELEMENTS} are supported")
        return tuple(v)

    def size(self, v, field: str, dims) -> tuple:
        """A buffer size as [int, dim names...]: their product."""
        self.list(v, field, MAX_RANK + 1)
        if not v:
            self.fail(field, "an empty size (it needs at least its constant factor)")
        self.int(v[0], f"{field}[0]")
        for i, d in enumerate(v[1:], 1):
            self.dim(d, f"{field}[{i}]", dims)
        return tuple(v)

    def dim(self, d, field: str, dims) -> str:
        """A dim name, or a product of dim names and ints in canonical form (`2*B*T`)."""
        if isinstance(d, str) and "*" in d:
            if d != dim_algebra.product(d) or not dim_algebra.symbols(d):
                self.fail(field, f"{_show(d)} is not a dim product in canonical form")
            for s in dim_algebra.symbols(d):
                self.dim(s, field, dims)
            return d
        self.name(d, field, what="a dim name")
        if dims is not None and d not in dims:
            self.fail(field, f"'{d}' is not one of the program's dims")
        if self.input_dims is not None and d not in self.input_dims:
            self.fail(field, f"no input binds the dim '{d}'")
        return d

    # -- the manifest ----------------------------------------------------------------------
    def check(self, m) -> None:
        self.obj(m, "the manifest")
        if "format" not in m:
            self.fail("format", "missing: this is no dlc artifact, or one from an older dlc; recompile the model")
        if type(m["format"]) is not int or m["format"] != FORMAT:
            self.fail(
                "format",
                f"artifact format {_show(m['format'])} is not one this dlc reads "
                f"({FORMAT}); recompile the model with this dlc",
            )
        self.obj(m, "the manifest", required=("inputs", "params", "tensors", "losses", "names", "programs"))
        for key in ("dlc_version", "model"):
            if key in m:
                self.str(m[key], key, 4096)
        # The GL target its shaders are for: compute (.glsl over storage buffers) or texture
        # (.frag passes over float textures); artifacts from before targets are compute.
        self.target = self.member(m.get("target", "compute"), TARGETS, "target", "a GL target")
        inputs = self.obj(m["inputs"], "inputs")
        self.input_dims = None  # any dim name in the inputs themselves
        for n, s in inputs.items():
            self.leaf(n, f"inputs: the name {_show(n)}")
            self.shape(s, f"inputs.{n}")
        self.input_dims = dim_algebra.shape_symbols(inputs.values())
        self.inputs = inputs
        self.leaves = {"input": set(inputs), "param": {}, "state": {}}
        for n, s in self.obj(m["params"], "params").items():
            self.leaf(n, f"params: the name {_show(n)}")
            self.leaves["param"][n] = self.fixed(s, f"params.{n}")
        # The model's state (running statistics, the random ops' counters): read by the eval
        # program too, so listed outside `train` (whose states include them).
        for n, s in self.obj(m.get("states", {}), "states").items():
            self.leaf(n, f"states: the name {_show(n)}")
            self.leaves["state"][n] = self.fixed(s, f"states.{n}")
        train = m.get("train")
        if train is not None:
            self.train(train)
        names = self.obj(m["names"], "names")
        for n in names:
            self.leaf(n, f"names: the name {_show(n)}")
        for n, s in self.obj(m["tensors"], "tensors").items():
            self.member(n, names, "tensors", f"a name in 'names' (the tensor {_show(n)})")
            self.shape(s, f"tensors.{n}")
        for n, t in self.obj(m.get("dtypes", {}), "dtypes").items():  # optional: i32 names
            self.member(n, {**names, **inputs}, "dtypes", f"an input or a name in 'names' (the key {_show(n)})")
            self.member(t, ("i32",), f"dtypes.{n}", "an element type other than the default f32 ('i32')")
        losses = self.list(m["losses"], "losses")
        for i, n in enumerate(losses):
            self.member(n, names, f"losses[{i}]", "a name in 'names'")
        if train is not None:
            self.member(train["loss"], losses, "train.loss", "one of 'losses'")
        progs = self.obj(m["programs"], "programs", required=("eval",))
        for name in progs:
            self.member(name, PROGRAMS, "programs", f"a program this dlc runs (the key {_show(name)})")
        if ("train" in progs) != (train is not None):
            self.fail("programs", "has a 'train' program exactly when 'train' is set")
        for name, spec in progs.items():
            self.program(spec, name)
        eval_tensors = progs["eval"]["tensors"]
        declared = {**m["tensors"], **inputs, **m["params"]}
        for n, t in names.items():
            self.int(t, f"names.{n}", 0, 2**34)
            if str(t) not in eval_tensors:
                self.fail(f"names.{n}", f"tensor {t} is not a tensor of the eval program")
            shape = eval_tensors[str(t)]["shape"]
            if n in declared and declared[n] != shape:
                self.fail(
                    f"names.{n}", f"tensor {t} has shape {_show(shape)}, but '{n}' is declared {_show(declared[n])}"
                )
        self.outputs(m, progs, names)
        if train is not None:  # the step returns its loss as one number
            loss = progs["train"]["roots"][0]
            shape = progs["train"]["tensors"][str(loss)]["shape"]
            if shape:
                self.fail(
                    "programs.train.roots[0]", f"the loss tensor {loss} has shape {_show(shape)}, not a scalar's []"
                )

    def outputs(self, m, progs, names) -> None:
        """`outputs` (optional): the names the outputs program fetches, there exactly when it is;
        the runtime reads each from that program as tensor `names[n]`, so each must be one of
        its roots (stored, never a slot reused before the read) of the eval program's shape."""
        if (OUTPUTS in m) != (OUTPUTS in progs):
            self.fail(OUTPUTS, f"is there exactly when programs.{OUTPUTS} is")
        if OUTPUTS not in m:
            return
        outputs = self.list(m[OUTPUTS], OUTPUTS, len(names))
        if not outputs:
            self.fail(OUTPUTS, "is empty: an outputs program fetches at least one tensor")
        spec = progs[OUTPUTS]
        roots = set(spec["roots"])
        for i, n in enumerate(outputs):
            field = f"{OUTPUTS}[{i}]"
            self.member(n, names, field, "a name in 'names'")
            if n in outputs[:i]:
                self.fail(field, f"'{n}' appears twice")
            t = names[n]
            if t not in roots:
                self.fail(field, f"tensor {t} ('{n}') is not a root of programs.{OUTPUTS}")
            shape, want = spec["tensors"][str(t)]["shape"], progs["eval"]["tensors"][str(t)]["shape"]
            if shape != want:
                self.fail(field, f"tensor {t} has shape {_show(shape)} there but {_show(want)} in the eval program")

    def fixed(self, v, field: str) -> int:
        """A shape of ints only (params, optimizer state); returns its element count."""
        shape = self.shape(v, field)
        for i, d in enumerate(shape):
            if not isinstance(d, int):
                self.fail(f"{field}[{i}]", f"must be a number: {_show(d)} is symbolic")
        return math.prod(shape)

    def train(self, t) -> None:
        self.obj(t, "train", required=("loss", "optimizer", "states"))
        self.str(t["loss"], "train.loss")
        opt = self.obj(t["optimizer"], "train.optimizer", required=("name", "lr"))
        self.name(opt["name"], "train.optimizer.name")
        self.number(opt["lr"], "train.optimizer.lr")
        for k, v in opt.items():
            self.name(k, f"train.optimizer: the key {_show(k)}")
            if k == "schedule" and v is not None:
                self.schedule(v)
                continue
            if k != "name" and not (v is None or type(v) in (bool, int, float, str)):
                self.fail(f"train.optimizer.{k}", f"must be a number, not {_what(v)}")
            if type(v) is float and not math.isfinite(v):
                self.fail(f"train.optimizer.{k}", f"must be finite, not {v}")
        if t.get("batch_size") is not None:
            self.int(t["batch_size"], "train.batch_size", 1)
        for n, s in self.obj(t["states"], "train.states").items():
            self.leaf(n, f"train.states: the name {_show(n)}")
            size = self.fixed(s, f"train.states.{n}")
            if self.leaves["state"].get(n, size) != size:
                self.fail(f"train.states.{n}", "differs from the model's state of that name ('states')")
            self.leaves["state"][n] = size

    def schedule(self, v) -> None:
        """A learning-rate schedule: its name and finite numbers (dlc.runtime.schedules checks
        the names and ranges again when it is built)."""
        sched = self.obj(v, "train.optimizer.schedule", required=("name",))
        self.name(sched["name"], "train.optimizer.schedule.name")
        for k, x in sched.items():
            self.name(k, f"train.optimizer.schedule: the key {_show(k)}")
            if k != "name":
                self.number(x, f"train.optimizer.schedule.{k}")

    # -- a program spec (compiler/codegen/program.py program_spec; runtime/executor.py runs it)
    def program(self, p, name: str) -> None:
        f = f"programs.{name}"
        # the name is the program's key; the writer always writes format and copies
        spec_keys = tuple(k for k in required_keys(ProgramSpec) if k != "name")
        self.typed(p, ProgramSpec, f, required=("format", *spec_keys, "copies"))
        if p["format"] != FORMAT:
            self.fail(f"{f}.format", f"program format {_show(p['format'])} is not one this dlc runs ({FORMAT})")
        if p.get("target", self.target) != self.target:
            self.fail(f"{f}.target", f"{_show(p['target'])} is not the artifact's target '{self.target}'")
        if "name" in p and p["name"] != name:
            self.fail(f"{f}.name", f"{_show(p['name'])} is not the program's key '{name}'")
        dims = self.list(p["dims"], f"{f}.dims", 256)
        for i, d in enumerate(dims):
            self.name(d, f"{f}.dims[{i}]", what="a dim name")
        dims = set(dims)
        inputs = self.leaves["input"] | ({LR} if name == "train" else set())
        slots = self.list(p["slots"], f"{f}.slots")
        for s, slot in enumerate(slots):
            self.slot(slot, f"{f}.slots[{s}]", dims, inputs)
        tensors = self.obj(p["tensors"], f"{f}.tensors")
        for key, info in tensors.items():
            if not re.fullmatch(r"0|[1-9][0-9]{0,9}", key):
                self.fail(f"{f}.tensors", f"the key {_show(key)} is not a tensor id")
            g = f"{f}.tensors.{key}"
            s = self.int(info["slot"], f"{g}.slot", 0, max(len(slots) - 1, 0))
            if not slots:
                self.fail(f"{g}.slot", "the program has no slots")
            shape = self.shape(info["shape"], f"{g}.shape", dims)
            self.str(info["label"], f"{g}.label", 4096)
            self.covers(slots[s], _count(shape), g, f"slot {s}")
        ids = {int(k) for k in tensors}

        def tensor(v, field):
            if self.int(v, field, 0, 2**34) not in ids:
                self.fail(field, f"tensor {v} is not in {f}.tensors")
            return v

        roots = self.list(p["roots"], f"{f}.roots")
        for i, t in enumerate(roots):
            tensor(t, f"{f}.roots[{i}]")
        if name == "train" and not roots:
            self.fail(f"{f}.roots", "is empty: the training step has no loss to fetch")
        for n, t in self.obj(p.get("fetch", {}), f"{f}.fetch").items():
            tensor(t, f"{f}.fetch.{n}")
        kernels = self.list(p["kernels"], f"{f}.kernels", 100_000)
        for k, spec in enumerate(kernels):
            self.kernel(spec, f"{f}.kernels[{k}]", k, slots, dims, inputs, tensor, tensors)
        for key, k in self.obj(p["producer"], f"{f}.producer").items():
            if not key.isdigit() or int(key) not in ids:
                self.fail(f"{f}.producer", f"the key {_show(key)} is not in {f}.tensors")
            self.int(k, f"{f}.producer.{key}", 0, len(kernels) - 1)
        persistent = {**self.leaves["param"], **self.leaves["state"]}
        for what in ("inplace", "copies"):
            for i, c in enumerate(self.list(p.get(what, []), f"{f}.{what}")):
                g = f"{f}.{what}[{i}]"
                target = self.member(c["target"], persistent, f"{g}.target", "a param or optimizer state")
                t = tensor(c["tensor"], f"{g}.tensor")
                count = _count(tuple(tensors[str(t)]["shape"]))
                if count != (persistent[target], ()):
                    self.fail(
                        g, f"tensor {t} has {_format_count(count)} elements but '{target}' has {persistent[target]}"
                    )

    def slot(self, slot, f: str, dims, inputs) -> None:
        kind = self.member(slot["kind"], SLOT_KINDS, f"{f}.kind", "a slot kind")
        sizes = self.list(slot["sizes"], f"{f}.sizes", 4096)
        if not sizes:
            self.fail(f"{f}.sizes", "is empty")
        for i, z in enumerate(sizes):
            self.size(z, f"{f}.sizes[{i}]", dims)
        if kind in ("input", "param", "state"):
            if "name" not in slot:
                self.fail(f, f"a{'n' if kind == 'input' else ''} {kind} slot needs a 'name'")
            self.leaf(slot["name"], f"{f}.name")
            known = inputs if kind == "input" else self.leaves[kind]
            self.member(slot["name"], known, f"{f}.name", f"one of the artifact's {kind}s")
        if kind == "input":  # the fed array is uploaded into the slot's buffer: it must fit
            shape = self.inputs.get(slot["name"], [1])  # '$lr' is one number
            self.covers(slot, _count(tuple(shape)), f, f"input '{slot['name']}'s slot")
        if kind in PERSISTENT:  # the leaf's own buffer: exactly its elements
            have = self.leaves[kind][slot["name"]]
            for i, z in enumerate(sizes):
                if z != [have]:
                    self.fail(f"{f}.sizes[{i}]", f"{_show(z)} is not the {have} elements of {kind} '{slot['name']}'")
        if kind == "const":
            values = self.list(slot.get("values"), f"{f}.values", MAX_ELEMENTS)  # finite numbers (typed)
            for i, z in enumerate(sizes):
                if len(z) > 1 or z[0] > len(values):
                    self.fail(f"{f}.sizes[{i}]", f"{_show(z)} is not within the {len(values)} values of the const")

    def covers(self, slot: dict, count: tuple[int, tuple], f: str, what: str) -> None:
        """A tensor of `count` elements fits in `slot` for every binding of the dims."""
        n, syms = count
        kind = slot["kind"]
        if kind in PERSISTENT:
            have = self.leaves[kind][slot["name"]]
            if syms or n > have:
                self.fail(f, f"{_format_count(count)} elements do not fit in {kind} '{slot['name']}' ({have})")
            return
        for z in slot["sizes"]:
            rest = list(z[1:])
            for d in syms:
                if d not in rest:
                    break
                rest.remove(d)
            else:
                if z[0] >= n:  # every dim is >= 1, so extra dims only add room
                    return
        self.fail(f, f"{_format_count(count)} elements do not fit in {what} (sizes {_show(slot['sizes'])})")

    def kernel(self, k, f: str, index: int, slots, dims, inputs, tensor, tensors) -> None:
        # ir, locs (and the tensors' labels) are what debug mode reports
        launch = ("file", "grid") if self.target == "compute" else ("passes",)  # optional fields per target
        self.obj(k, f, required=launch)
        self.name(k["name"], f"{f}.name", what="a kernel name")
        ks = self.list(k["slots"], f"{f}.slots", MAX_BINDINGS)
        for i, s in enumerate(ks):
            self.int(s, f"{f}.slots[{i}]", 0, len(slots) - 1)
        for u, d in self.obj(k["uniforms"], f"{f}.uniforms").items():
            self.name(u, f"{f}.uniforms: the name {_show(u)}", what="a GLSL identifier")
            self.dim(d, f"{f}.uniforms.{u}", dims)
        if self.target == "compute":
            check_file_name(k["file"], f"{f}.file", self.fail)
            if not k["file"].endswith(".glsl"):
                self.fail(f"{f}.file", f"{_show(k['file'])} is not a .glsl file")
            self.grid(k["grid"], f"{f}.grid", dims)
        else:
            self.passes(k, f, dims)
        if k.get("local_size") is not None:  # (null: none, as for every optional field)
            for i, v in enumerate(self.list(k["local_size"], f"{f}.local_size", 3)):
                self.int(v, f"{f}.local_size[{i}]", 1, MAX_LOCAL_SIZE)
        for what in ("reads", "writes"):
            for i, t in enumerate(self.list(k[what], f"{f}.{what}")):
                tensor(t, f"{f}.{what}[{i}]")
                if what == "writes" and tensors[str(t)]["slot"] not in ks:
                    self.fail(
                        f"{f}.writes[{i}]",
                        f"tensor {t} lives in slot {tensors[str(t)]['slot']}, which the kernel does not bind",
                    )
        for i, a in enumerate(self.list(k["after"], f"{f}.after")):
            if index == 0:
                self.fail(f"{f}.after[{i}]", "the first kernel runs after no other")
            self.int(a, f"{f}.after[{i}]", 0, index - 1)
        for i, n in enumerate(self.list(k["inputs"], f"{f}.inputs")):
            self.member(n, inputs, f"{f}.inputs[{i}]", "an input of the artifact")
        for i, line in enumerate(self.list(k["ir"], f"{f}.ir")):
            self.str(line, f"{f}.ir[{i}]")
        for i, loc in enumerate(self.list(k["locs"], f"{f}.locs")):  # typed: null or [file, line, column]
            if loc is not None:
                g = f"{f}.locs[{i}]"
                self.str(loc[0], f"{g}[0]", 4096)
                self.int(loc[1], f"{g}[1]")
                self.int(loc[2], f"{g}[2]")

    def passes(self, k, f: str, dims) -> None:
        """A texture kernel's render passes: a .frag each, rendering one tensor it writes (or,
        tensor null, a reduction's partials into its scratch texture)."""
        writes = k["writes"] if isinstance(k["writes"], list) else []
        units = []  # packed matmul operands (texture_matmul): on units after the kernel's slots
        for i, q in enumerate(self.list(k.get("packed", []), f"{f}.packed", 3)):
            g = f"{f}.packed[{i}]"
            units.append(self.int(q["unit"], f"{g}.unit", len(k["slots"]), MAX_BINDINGS))
            self.size(q["rows"], f"{g}.rows", dims)
            self.size(q["depth"], f"{g}.depth", dims)
            if "label" in q:
                self.str(q["label"], f"{g}.label", 4096)
        passes = self.list(k["passes"], f"{f}.passes", MAX_BINDINGS)
        if not passes:
            self.fail(f"{f}.passes", "a kernel renders at least one pass")
        for i, p in enumerate(passes):
            g = f"{f}.passes[{i}]"
            check_file_name(p["file"], f"{g}.file", self.fail)
            if not p["file"].endswith(".frag"):
                self.fail(f"{g}.file", f"{_show(p['file'])} is not a .frag file")
            if p.get("into") is not None:  # renders a packed matmul operand
                if p["into"] not in units or p["tensor"] is not None:
                    self.fail(f"{g}.into", f"{_show(p['into'])} is not a packed unit of the kernel (tensor null)")
            elif p["tensor"] is None:
                if k.get("scratch") is None:
                    self.fail(f"{g}.tensor", "null (partials) needs the kernel's 'scratch'")
            elif p["tensor"] not in writes:
                self.fail(f"{g}.tensor", f"{_show(p['tensor'])} is not a tensor the kernel writes")
        if k.get("scratch") is not None:  # a two-pass reduction's partials texture
            sc = k["scratch"]
            self.size(sc["size"], f"{f}.scratch.size", dims)
            self.int(sc["unit"], f"{f}.scratch.unit", 0, MAX_BINDINGS)

    def grid(self, g, f: str, dims) -> None:
        self.obj(g, f)
        if g.get("tiles") is not None:
            tiles = self.list(g["tiles"], f"{f}.tiles", 3)
            if len(tiles) != 3:
                self.fail(f"{f}.tiles", f"has {len(tiles)} entries, not 3 (x, y, z)")
            for i, t in enumerate(tiles):  # typed: [size, tile]
                self.size(t[0], f"{f}.tiles[{i}][0]", dims)
                self.int(t[1], f"{f}.tiles[{i}][1]", 1)
            if "scratch" in g:  # a split-K GEMM's partial tiles (kernels_matmul._split_k)
                self.int(g["scratch"], f"{f}.scratch", 1, 1)
        elif g.get("flat") is not None:
            self.obj(g, f, required=("per_group",))
            self.size(g["flat"], f"{f}.flat", dims)
            self.int(g["per_group"], f"{f}.per_group", 1)
            if g.get("split") is not None:  # a long reduction cut into chunks (kernels_reduce)
                split = g["split"]  # typed: [size, chunk]
                self.size(split[0], f"{f}.split[0]", dims)
                self.int(split[1], f"{f}.split[1]", 1)
            if "scratch" in g:  # words per (output, chunk) of the split's scratch buffer
                if g.get("split") is None:
                    self.fail(f"{f}.scratch", "needs 'split'")
                self.int(g["scratch"], f"{f}.scratch", 1, 2)
        else:
            self.fail(f, "needs 'tiles' or 'flat'")


TARGETS = ("compute", "texture")


def check_file_name(name, field: str, fail) -> str:
    """A file of the artifact: one plain name inside its folder (`fail(field, problem)`)."""
    if not isinstance(name, str):
        fail(field, f"must be a file name, not {_what(name)}")
    if "/" in name or "\\" in name or ".." in name or os.path.isabs(name):
        fail(field, f"{_show(name)} leaves the artifact folder")
    if len(name) > 200 or not FILE.match(name):
        fail(field, f"{_show(name)} is not a plain file name")
    return name


def _count(shape: tuple) -> tuple[int, tuple]:
    """A shape's element count as (constant factor, sorted symbolic dims)."""
    n = 1
    syms = []
    for d in shape:
        known, factors = dim_algebra.factors(d)
        n *= known
        syms.extend(factors)
    return n, tuple(sorted(syms))


def _format_count(count: tuple[int, tuple]) -> str:
    n, syms = count
    return "*".join([str(n), *syms]) if syms else str(n)


def leaf_shapes(m: Mapping) -> tuple[dict, dict]:
    """(param name -> shape, state name -> shape) of a validated manifest: the model's state
    and the training step's."""
    states = {**m.get("states", {}), **(m.get("train") or {}).get("states", {})}
    return ({n: tuple(s) for n, s in m["params"].items()}, {n: tuple(s) for n, s in states.items()})
