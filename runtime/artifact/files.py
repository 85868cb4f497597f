"""The files an artifact's manifest names, read as untrusted input.

Every file is read through `read_confined`: a plain name inside the artifact folder (symlinks
are resolved and must stay inside), a regular file (no FIFO or device that would block), at
most a bounded number of bytes. Shaders must be ASCII and declare only the uniforms and
buffer bindings the manifest gives them values for; .npz files are read without pickles, their
names and shapes checked against the manifest before any array data is read.
"""

from __future__ import annotations

import os
import pathlib
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import DataError
from ..npzfile import NpzReader
from ..spec import Kernel, programs_from_json
from .manifest import MANIFEST, MAX_MANIFEST_BYTES, ArtifactError, check_file_name, leaf_shapes, parse, validate

MAX_SHADER_BYTES = 1 << 20
NPZ_SLACK = 1 << 20  # bytes of zip and .npy headers allowed beside the array data

# No leading \b: a pattern that starts with its literal is scanned much faster (fuzzing
# reads thousands of shaders); `_words` drops matches inside a longer word instead.
# (a precision qualifier, which GLSL allows before any uniform's type, is skipped: a
# `uniform highp int n;` is checked as `uniform int n;` is)
_UNIFORM = re.compile(r"uniform\s+(?:(?:lowp|mediump|highp)\s+)?(\w+)\s+(\w+)\s*;")
_BINDING = re.compile(r"binding\s*=\s*(\w+)")


def _words(pattern: re.Pattern, text: str) -> list:
    return [
        m.groups()
        for m in pattern.finditer(text)
        if m.start() == 0 or not (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_")
    ]


def _fail(where: str, prefix: str = ""):
    """`fail(field, problem)` raising an ArtifactError for the manifest at `where`; `field`
    is put after `prefix` (the kernel's field) when there is one."""

    def fail(field: str, problem: str):
        raise ArtifactError(f"{where}: {prefix + '.' if prefix else ''}{field}: {problem}")

    return fail


@dataclass
class ArtifactFiles:
    """An artifact folder read and checked whole: what `dlc.load` needs before any GL call."""

    manifest: dict
    sources: dict[str, dict[str, str]]  # program -> {file -> GLSL text}
    param_shapes: dict[str, tuple]
    params: dict[str, np.ndarray]  # initial values
    state: dict[str, np.ndarray]  # optimizer state (empty without a training step)


def read_artifact(folder: str | os.PathLike) -> ArtifactFiles:
    """Validate manifest.json, then read the files it names (ArtifactError on any problem)."""
    folder = pathlib.Path(folder)
    return read_named_files(folder, read_manifest(folder))


def read_named_files(folder: pathlib.Path, m: dict) -> ArtifactFiles:
    """The shaders and .npz files that the validated manifest `m` of `folder` names (its
    programs typed here when they are not yet)."""
    where = str(folder / MANIFEST)
    m = programs_from_json(m)
    sources = read_shaders(folder, m, where)
    params, states = leaf_shapes(m)
    initial = read_npz(folder, "params.npz", params, where, "params")
    has_state = m.get("train") or m.get("states")
    state = read_npz(folder, "state.npz", states, where, "train.states") if has_state else {}
    return ArtifactFiles(m, sources, params, initial, state)


def read_manifest(folder: str | os.PathLike) -> dict:
    """manifest.json of `folder`, parsed and validated (ArtifactError on any problem), its
    programs typed (`runtime.spec.ProgramSpec`)."""
    folder = pathlib.Path(folder)
    where = str(folder / MANIFEST)
    raw = read_confined(folder, MANIFEST, MAX_MANIFEST_BYTES, where, "file")
    data = parse(raw, where)
    validate(data, where)
    return programs_from_json(data)


def read_confined(folder: pathlib.Path, name: str, limit: int, where: str, field: str) -> bytes:
    """The bytes of file `name` in `folder`, refused unless it is a regular file inside the
    folder (after resolving symlinks) of at most `limit` bytes. Messages start with `where`
    (the manifest) and `field` (what named the file)."""
    fail = _fail(where)
    check_file_name(name, field, fail)
    if not folder.is_dir():
        raise ArtifactError(f"{folder}: not a dlc artifact folder")
    root = folder.resolve()
    path = folder / name
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        fail(field, f"'{name}' is missing from {folder}")
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop
        fail(field, f"'{name}' cannot be opened ({e})")
    if real.parent != root:
        fail(field, f"'{name}' is a link that leaves the artifact folder")
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        fail(field, f"'{name}' cannot be opened ({e.strerror})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            fail(field, f"'{name}' is not a regular file")
        if info.st_size > limit:
            fail(field, f"'{name}' is {info.st_size} bytes; at most {limit} are allowed")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as e:
        fail(field, f"'{name}' cannot be read ({e.strerror})")
    finally:
        os.close(fd)
    if len(data) > limit:
        fail(field, f"'{name}' is over {limit} bytes")
    return data


def read_shaders(folder: pathlib.Path, m: Mapping, where: str) -> dict[str, dict[str, str]]:
    """program -> {file -> GLSL text} for every kernel of a validated manifest, each checked
    against its kernel's entry: a uniform the manifest does not set would silently stay 0,
    and a binding beyond the kernel's slots would read whatever buffer was bound last."""
    out: dict[str, dict[str, str]] = {}
    texture = m.get("target", "compute") == "texture"
    for prog, spec in m["programs"].items():
        sources = out[prog] = {}
        for i, k in enumerate(spec.kernels):
            field = f"programs.{prog}.kernels[{i}]"
            files = (
                [(p.file, f"{field}.passes[{j}].file") for j, p in enumerate(k.passes)]
                if texture
                else [(k.file, f"{field}.file")]
            )
            for name, file_field in files:
                raw = read_confined(folder, name, MAX_SHADER_BYTES, where, file_field)
                try:
                    text = raw.decode("ascii")
                except UnicodeDecodeError as e:
                    raise ArtifactError(f"{where}: {file_field}: '{name}' is not ASCII text (byte {e.start})") from None
                if texture:
                    check_fragment_shader(text, name, k, _fail(where, field))
                else:
                    check_shader(text, k, _fail(where, field))
                sources[name] = text
    return out


def check_shader(text: str, kernel: Kernel, fail) -> None:
    """Declared uniforms and bindings of `text` against the kernel's manifest entry."""
    if "\0" in text:
        fail("file", f"'{kernel.file}' holds a NUL byte")
    declared = {}
    for kind, name in _words(_UNIFORM, text):
        declared[name] = kind
    for u in kernel.uniforms:
        if declared.get(u) != "int":
            fail(f"uniforms.{u}", f"'{kernel.file}' declares no uniform int {u}")
    # Tile counts of a wrapped grid are set by the runtime from the grid (codegen/compute.py tile_lines).
    runtime_set = {f"dlc_tiles_{axis}" for axis in "xyz"} if kernel.grid.tiles is not None else set()
    for name, kind in declared.items():
        if name in runtime_set and kind == "int":
            continue
        if name not in kernel.uniforms:
            fail("uniforms", f"'{kernel.file}' declares uniform {kind} {name}, which the manifest gives no value")
    # A split reduction's scratch buffer is bound after the slots (runtime.executor.scratch_words).
    bound = len(kernel.slots) + bool(kernel.grid.scratch)
    used = set()
    for (b,) in _words(_BINDING, text):
        if not b.isdigit() or int(b) >= bound:
            fail(
                "slots",
                f"'{kernel.file}' uses buffer binding {b}; the kernel binds "
                f"{bound} slot{'s' if bound != 1 else ''} (0 to {bound - 1})",
            )
        used.add(int(b))
    if len(used) != bound:  # every slot the manifest binds is one the shader declares
        fail("slots", f"{bound} slots for the {len(used)} buffer bindings that '{kernel.file}' declares")


_SAMPLER = re.compile(r"b\d{1,3}")


def check_fragment_shader(text: str, name: str, kernel: Kernel, fail) -> None:
    """A texture pass: no storage buffers; int uniforms the manifest sets (or the output
    width the runtime sets); samplers named b<unit>, set by the runtime."""
    if "\0" in text:
        fail("passes", f"'{name}' holds a NUL byte")
    if re.search(r"\bbuffer\b", text):
        fail("passes", f"'{name}' declares a storage buffer, which a texture pass cannot use")
    declared = dict((n, kind) for kind, n in _words(_UNIFORM, text))
    for u in kernel.uniforms:
        if declared.get(u) != "int":
            fail(f"uniforms.{u}", f"'{name}' declares no uniform int {u}")
    for n, kind in declared.items():
        ok = (kind == "int" and (n in kernel.uniforms or n == "dlc_width")) or (
            kind in ("sampler2D", "sampler2DArray") and _SAMPLER.fullmatch(n)
        )
        if not ok:
            fail("uniforms", f"'{name}' declares uniform {kind} {n}, which the manifest gives no value")


def read_npz(
    folder: pathlib.Path, name: str, shapes: Mapping[str, tuple], where: str, field: str
) -> dict[str, np.ndarray]:
    """Arrays of `folder/name` as float32: exactly the names of `shapes`, each of its shape,
    finite. Read confined and bounded, then through NpzReader (headers checked before data is
    read; no pickles)."""
    want_bytes = sum(8 * int(np.prod(s, dtype=np.int64)) for s in shapes.values())
    raw = read_confined(folder, name, want_bytes + NPZ_SLACK + 512 * len(shapes), where, field)
    fail = _fail(where)
    try:
        z = NpzReader(name, data=raw)
    except DataError as e:
        fail(field, f"'{name}' is not a readable .npz file ({str(e).removeprefix(name + ': ')})")
    out = {}
    with z:
        for key in z.files:
            if key not in shapes:
                fail(
                    field, f"'{name}' holds '{key[:100]}.npy', which is not one of the manifest's {len(shapes)} arrays"
                )
        for key, shape in shapes.items():
            if key not in z.files:
                fail(field, f"'{name}' has no array '{key}'")
            out[key] = _read_member(z, key, tuple(shape), name, fail, field)
    return out


def _read_member(z: NpzReader, key: str, shape: tuple, name: str, fail, field: str) -> np.ndarray:
    try:
        got, dtype = z.header(key)
        if got != shape:
            fail(field, f"'{name}': array '{key}' has shape {list(got)} but the manifest says {list(shape)}")
        if dtype.hasobject or dtype.kind not in "fiu" or dtype.itemsize > 8:
            fail(field, f"'{name}': array '{key}' holds {dtype}, not numbers")
        arr = np.asarray(z[key], dtype=np.float32).reshape(shape)
    except DataError as e:
        if isinstance(e, ArtifactError):
            raise
        fail(field, f"'{name}' is not a readable .npz file ({str(e).removeprefix(name + ': ')})")
    if not np.all(np.isfinite(arr)):
        fail(field, f"'{name}': array '{key}' holds NaN or infinite values")
    return arr
