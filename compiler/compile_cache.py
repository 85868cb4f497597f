"""The compiler's output cached on disk by hash, so a new process skips the work it did before.

Two kinds of entries, next to the program binaries (runtime/binary_cache.py, whose safe
reads and atomic writes they share):

- `models/`: a model's IR graph (`dlc.compile`'s result: parse, build, shape check), keyed by
  the model's text and path; a hit does not import lark or the parser.
- `compiled/`: the back end's output for one graph (fuse, plan, codegen): the program spec
  and its GLSL files, keyed by the graph (every node, attr and source location), the
  fetches, updates and dims it is planned at, the codegen options, the target and the GL
  renderer.

Every key also holds dlc's version and a stamp of the compiler's own files (their names,
sizes and modification times), so an edited compiler never sees what an older one wrote.
The folder is untrusted: an entry is used only when binary_cache's checks pass (regular
file, sane size, header, length, sha256 of the payload), the payload parses as what was
written (strict JSON, every field of the expected type) and names the key it is filed under;
anything else is a miss, and the file is removed. `DLC_COMPILE_CACHE=0` turns both off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dlc.runtime import binary_cache, spec
from dlc.runtime.errors import Loc
from dlc.runtime.optional import require
from dlc.runtime.spec import ProgramSpec
from dlc.runtime.version import __version__

from . import modes
from .ir import Graph, Node

FORMAT = 1  # of the payloads below; binary_cache's header keeps it
_ROOT = os.path.dirname(os.path.abspath(__file__))  # the compiler package
_stamp: str | None = None


def enabled() -> bool:
    return os.environ.get("DLC_COMPILE_CACHE", "1").strip() not in ("0", "false", "no", "off")


def code_stamp() -> str:
    """A hash of dlc's version and of every file of the compiler package, the grammar and the
    program spec (names, sizes, modification times): changes when any of them does."""
    global _stamp
    if _stamp is None:
        h = hashlib.sha256(f"dlc {__version__} format {FORMAT}".encode())
        grammar = os.path.join(os.path.dirname(_ROOT), "grammar")
        for folder in (_ROOT, grammar):
            for path in sorted(_files(folder)):
                _stamp_file(h, path)
        _stamp_file(h, spec.__file__)
        _stamp = h.hexdigest()
    return _stamp


def _files(folder: str) -> Iterable[str]:
    for base, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            if name.endswith((".py", ".lark")):
                yield os.path.join(base, name)


def _stamp_file(h, path: str) -> None:
    try:
        info = os.stat(path)
    except OSError:
        return
    h.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\0".encode("utf-8", "surrogatepass"))


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in (code_stamp(), *parts):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def _load_json(folder: str, key: str) -> Any:
    found = binary_cache.load(key, folder)
    if found is None:
        return None
    fmt, payload = found
    try:
        data = json.loads(payload.decode("utf-8"))
        if fmt == FORMAT and isinstance(data, dict) and data.get("key") == key:
            return data
    except (UnicodeDecodeError, ValueError, RecursionError):
        pass
    binary_cache.forget(key, folder)
    return None


def _store_json(folder: str, key: str, data: dict) -> None:
    payload = json.dumps({"key": key, **data}, separators=(",", ":"), allow_nan=False)
    binary_cache.store(key, FORMAT, payload.encode("utf-8"), folder)


# -- compiled programs ------------------------------------------------------------------------


def program_key(
    graph,
    roots: Sequence[int],
    updates: Iterable[tuple[str, int]],
    ref_dims: Mapping[str, int] | None,
    options: Mapping | None,
    target: str,
) -> str | None:
    """The cache key of compiling `roots` (and `updates`) of `graph`, or None when something
    in it has no stable text (then it is not cached): the graph as the models' entries write
    it, every attr and source location included."""
    try:
        graph_text = json.dumps(_graph_json(graph), separators=(",", ":"), allow_nan=False)
        rest = json.dumps(
            [
                [int(r) for r in roots],
                [[t, int(i)] for t, i in updates],
                sorted((str(d), int(v)) for d, v in (ref_dims or {}).items()),
                [[str(k), _encode(v)] for k, v in sorted((options or {}).items())],
            ],
            allow_nan=False,
        )
    except (_Unstable, TypeError, ValueError):
        return None
    return _key("program", target, graph_text, rest)


def load_program(key: str):
    """(ProgramSpec, sources) stored under `key`, or None."""
    data = _load_json("compiled", key)
    if data is None:
        return None
    try:
        sources = data["sources"]
        spec = ProgramSpec.from_json(data["spec"])
        if not (isinstance(sources, dict) and all(isinstance(v, str) for v in sources.values())):
            raise ValueError("sources")
        if any(k.file not in sources for k in spec.kernels):
            raise ValueError("a kernel's file is missing")
        return spec, sources
    except Exception:  # untrusted: whatever does not read back is a miss
        binary_cache.forget(key, "compiled")
        return None


def store_program(key: str, spec, sources: Mapping[str, str]) -> None:
    try:
        _store_json("compiled", key, {"spec": spec.to_json(), "sources": dict(sources)})
    except (TypeError, ValueError):  # something in the spec JSON cannot write (NaN): not cached
        pass


class CachedProgram:
    """A compiled program read back from the cache: its `spec` and `sources`, which the
    executor runs; the fusion, plan and kernel sources (debug tools, benchmarks) are made
    again by `compile()` on first use."""

    def __init__(self, name: str, spec, sources: Mapping[str, str], compile):
        self.name, self.spec, self.sources = name, spec, dict(sources)
        self._compile = compile
        self._full = None

    def __getattr__(self, attr: str):
        if attr in ("fusion", "plan", "kernels"):
            if self._full is None:
                self._full = self._compile()
            return getattr(self._full, attr)
        raise AttributeError(attr)


# -- compiled models --------------------------------------------------------------------------


class _Unstable(Exception):
    """A value with no JSON form here: the graph is not cached."""


def _encode(v: Any) -> Any:
    """An attr value as JSON: floats as their repr (exact, NaN and inf included), tuples,
    lists and dicts tagged; anything else is not cached."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if type(v) is int:
        return v
    if type(v) is float:
        return {"f": repr(v)}
    if type(v) is tuple:
        return {"t": [_encode(x) for x in v]}
    if type(v) is list:
        return {"l": [_encode(x) for x in v]}
    if type(v) is dict:  # e.g. the device's limits
        return {"d": [[str(k), _encode(x)] for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))]}
    raise _Unstable(type(v).__name__)


def _decode(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if type(v) is dict and len(v) == 1:
        ((tag, x),) = v.items()
        if tag == "f" and type(x) is str:
            return float(x)
        if tag == "t" and type(x) is list:
            return tuple(_decode(y) for y in x)
        if tag == "l" and type(x) is list:
            return [_decode(y) for y in x]
    raise ValueError("not an encoded value")


def _graph_json(graph) -> dict:
    nodes = []
    for n in graph.nodes:
        loc = None if n.loc is None else [n.loc.file, n.loc.line, n.loc.column, n.loc.text]
        attrs = [[k, _encode(v)] for k, v in n.attrs]
        nodes.append([n.op, list(n.inputs), [_encode(d) for d in n.shape], attrs, loc])
    return {
        "nodes": nodes,
        "names": [[k, i] for k, i in graph.names.items()],
        **{f: list(getattr(graph, f)) for f in ("inputs", "params", "states", "losses", "metrics")},
        "updates": [[t, i] for t, i in graph.updates],
    }


def _entry(graph) -> dict:
    """A graph as a models/ or train/ entry holds it: with each node's element type, so that
    the graph read back needs no op registry (a warm start then imports no op module). A
    graph built on a warm path (eval_form's rewrite of a cached model) has no types yet: the
    miss pays for the registry that computes them."""
    if "dtypes" not in graph.__dict__:
        require("dlc.compiler.registry")
    return {"graph": _graph_json(graph), "dtypes": list(graph.dtypes)}


def _graph_of(data: Any):
    """The graph of an entry `_entry` wrote, its element types set when they read back whole."""
    graph = _graph_from_json(data["graph"])
    dtypes = data.get("dtypes")
    if type(dtypes) is list and len(dtypes) == len(graph.nodes) and all(d in ("f32", "i32") for d in dtypes):
        graph.__dict__["dtypes"] = tuple(dtypes)  # Graph.dtypes is a cached_property: filled here
    return graph


def _strs(v: Any) -> tuple[str, ...]:
    if type(v) is not list or not all(type(x) is str for x in v):
        raise ValueError("not a list of names")
    return tuple(v)


def _graph_from_json(data: Any):
    nodes = []
    for index, raw in enumerate(data["nodes"]):
        op, inputs, shape, attrs, loc = raw
        if type(op) is not str or type(inputs) is not list or type(shape) is not list or type(attrs) is not list:
            raise ValueError("a malformed node")
        if not all(type(i) is int and 0 <= i < index for i in inputs):
            raise ValueError("a node reads one after it")
        dims = tuple(_decode(d) for d in shape)
        if not all(type(d) is str or (type(d) is int and d >= 0) for d in dims):
            raise ValueError("a malformed shape")
        pairs = []
        for pair in attrs:
            key, value = pair
            if type(key) is not str:
                raise ValueError("a malformed attr")
            pairs.append((key, _decode(value)))
        if loc is not None:
            file, line, column, text = loc
            if not (type(file) is str and type(line) is int and type(column) is int and type(text) is str):
                raise ValueError("a malformed source location")
            loc = Loc(file, line, column, text)
        nodes.append(Node(op, tuple(inputs), dims, tuple(pairs), loc))
    names = {}
    for name, i in data["names"]:
        if type(name) is not str or type(i) is not int or not 0 <= i < len(nodes):
            raise ValueError("a malformed name")
        names[name] = i
    updates = []
    for target, i in data["updates"]:
        if type(target) is not str or type(i) is not int or not 0 <= i < len(nodes):
            raise ValueError("a malformed update")
        updates.append((target, i))
    fields = {f: _strs(data[f]) for f in ("inputs", "params", "states", "losses")}
    fields["metrics"] = _strs(data.get("metrics", []))  # `metric NAME = EXPR`
    if any(n not in names for f in fields.values() for n in f):
        raise ValueError("a leaf or loss that is not named")
    return Graph(tuple(nodes), names, updates=tuple(updates), **fields)


def model_key(text: str, path: str) -> str:
    return _key("model", path, text)


def load_model(text: str, path: str):
    """The IR graph that compiling `text` (the model file `path`) made before, or None."""
    key = model_key(text, path)
    data = _load_json("models", key)
    if data is None:
        return None
    try:
        return _graph_of(data)
    except Exception:  # untrusted: whatever does not read back is a miss
        binary_cache.forget(key, "models")
        return None


def store_model(text: str, path: str, graph) -> None:
    try:
        _store_json("models", model_key(text, path), _entry(graph))
    except (_Unstable, TypeError, ValueError):
        pass


# -- training steps ---------------------------------------------------------------------------


def train_graph(graph, loss: str | None, optimizer, freeze: Sequence[str] = ()):
    """`compiler.train_graph.build_train_graph(graph, loss, optimizer, freeze)`, read from the
    cache when this model, loss, optimizer config and freeze list made it before: a warm start
    then skips autodiff and simplify (and their imports). An optimizer config with no stable
    text is built every time."""
    key = None
    if enabled():
        try:
            frozen = [freeze] if isinstance(freeze, str) else [str(f) for f in freeze]
            config = json.dumps([loss, _encode(_plain(optimizer.config())), frozen], allow_nan=False)
            graph_text = json.dumps(_graph_json(graph), separators=(",", ":"), allow_nan=False)
            key = _key("train", graph_text, config)
        except (_Unstable, TypeError, ValueError):
            key = None
    # the registry on a miss only: a warm start asks none
    return _cached_graph(
        key, lambda: require("dlc.compiler.train_graph").build_train_graph(graph, loss, optimizer, freeze)
    )


def resident_graph(step, inputs: Sequence[str], dim: str, examples: int):
    """`compiler.resident.resident_graph(step, inputs, dim, examples)` (the step reading its
    batch from data kept on the GPU), read from the cache when this step made it before."""
    key = None
    if enabled():
        try:
            graph_text = json.dumps(_graph_json(step), separators=(",", ":"), allow_nan=False)
            key = _key("resident", graph_text, json.dumps([[str(i) for i in inputs], str(dim), int(examples)]))
        except (_Unstable, TypeError, ValueError):
            key = None
    return _cached_graph(key, lambda: require("dlc.compiler.resident").resident_graph(step, inputs, dim, examples))


def _cached_graph(key: str | None, build: Callable[[], Any]):
    """The graph the cache holds under `key` (None: not cacheable), else `build()`, stored."""
    if key is not None:
        data = _load_json("train", key)
        if data is not None:
            try:
                return _graph_of(data)
            except Exception:  # untrusted: whatever does not read back is a miss
                binary_cache.forget(key, "train")
    out = build()
    if key is not None:
        try:
            _store_json("train", key, _entry(out))
        except (_Unstable, TypeError, ValueError):
            pass
    return out


def eval_form(graph):
    """`compiler.modes.eval_form(graph)` (dropout the identity, batch_norm by its running
    statistics), read from the cache with its element types when this graph made it before,
    so that a warm eval, predict or generate asks no op registry either."""
    out = modes.eval_form(graph)
    if out is graph or not enabled() or "dtypes" in out.__dict__:
        return out
    try:
        key = _key("eval", json.dumps(_graph_json(graph), separators=(",", ":"), allow_nan=False))
    except (_Unstable, TypeError, ValueError):
        return out
    data = _load_json("train", key)
    if data is not None:
        try:
            cached = _graph_of(data)
            if cached == out:  # the rewrite is cheap: made again, only its element types are read
                return cached
        except Exception:  # untrusted: whatever does not read back is a miss
            pass
        binary_cache.forget(key, "train")
    try:
        _store_json("train", key, _entry(out))
    except (_Unstable, TypeError, ValueError):
        pass
    return out


def _plain(v: Any) -> Any:
    """An optimizer config with its schedule (a frozen dataclass, e.g. `Cosine(decay_steps=100,
    ...)`) as its repr, which names every field exactly."""
    if type(v) is tuple:
        return tuple(_plain(x) for x in v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and v.__dataclass_params__.frozen:
        return f"{type(v).__module__}.{v!r}"
    return v


def decode_form(graph, block: int):
    """`compiler.decode.decode_graph(graph, block)` as (the Decoder, "") or (None, why the
    model has none), read from the cache when this graph made it before, so that a warm
    generation asks no op registry."""
    key = None
    if enabled():
        try:
            graph_text = json.dumps(_graph_json(graph), separators=(",", ":"), allow_nan=False)
            key = _key("decode", graph_text, str(int(block)))
        except (_Unstable, TypeError, ValueError):
            key = None
    if key is not None:
        data = _load_json("train", key)
        if data is not None:
            try:
                return _decoder_of(data, block)
            except Exception:  # untrusted: whatever does not read back is a miss
                binary_cache.forget(key, "train")
    decode = require("dlc.compiler.decode")  # imported by generation only, not by a warm training step
    try:  # (the registry on a miss only: decode loads it on first use)
        out = decode.decode_graph(graph, block)
        entry = {
            "step": [_entry(out.step.graph), out.step.logits],
            "window": [_entry(out.window.graph), out.window.logits],
            "constants": _entry(out.constants),
            "caches": [[name, [_encode(d) for d in shape]] for name, shape in out.caches],
            "hoisted": [[name, [_encode(d) for d in shape]] for name, shape in out.hoisted],
        }
        found = (out, "")
    except decode.NotIncremental as e:
        entry, found = {"refused": str(e)}, (None, str(e))
    if key is not None:
        try:
            _store_json("train", key, entry)
        except (_Unstable, TypeError, ValueError):
            pass
    return found


def _decoder_of(data: dict, block: int):
    """(Decoder, "") or (None, why) from a decode entry (`decode_form`), checked."""
    if "refused" in data:
        if type(data["refused"]) is not str:
            raise ValueError("a malformed reason")
        return None, data["refused"]
    decode = require("dlc.compiler.decode")
    steps = []
    for field in ("step", "window"):
        entry, logits = data[field]
        graph = _graph_of(entry)
        if type(logits) is not int or not 0 <= logits < len(graph.nodes):
            raise ValueError("a malformed step")
        steps.append(decode.Step(graph, logits))
    leaves = []
    for field in ("caches", "hoisted"):
        pairs = []
        for name, shape in data[field]:
            dims = tuple(_decode(d) for d in shape)
            if type(name) is not str or not all(type(d) is str or (type(d) is int and d > 0) for d in dims):
                raise ValueError("a malformed leaf")
            pairs.append((name, dims))
        leaves.append(tuple(pairs))
    constants = _graph_of(data["constants"])
    return decode.Decoder(*steps, constants, *leaves, block), ""
