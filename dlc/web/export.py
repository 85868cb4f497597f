"""Writes a web export (README "The model in a browser"):

    index.html      a page over the model (for a digits classifier: draw a digit, see the
                    predicted class and the softmax bars)
    dlc.js          the JavaScript runtime (an ES module exporting `load`; no dependencies)
    manifest.json   the compiled artifact's manifest (target texture, GLSL ES 3.00) plus a
                    "web" section: the shader folder and the weights' byte offsets
    shaders.json    every pass's shader in one file (dlc/web/bundle.py: passes whose shaders differ
                    only in integer constants share one program), what dlc.js fetches and compiles
    shaders/        one GLSL ES 3.00 fragment shader per kernel pass, for reading (the code the
                    bundle gives each pass, with its comments)
    weights.bin     the params and optimizer state, little-endian float32, back to back
    model.dl        the model's source (for reading; dlc.js does not use it)
    vocab.json      a language model's vocabulary (its characters and block), when it has one

A language model (`input tokens: i32[B, T]` with T symbolic, a tensor `logits`) with its
vocabulary (`W.vocab.json` beside the weights, as `dlc train` writes it, or `vocab`) gets the
text page: type a prompt and watch the generated text appear (dlc.js `generateText`). When
compiler/decode.py finds its logits incremental (position-wise along T but for causal
attention), the export also carries the key/value cache's programs as `dlc generate` builds
them: `kv_step` (new ids at positions [pos, pos + n), writing each layer's keys and values
into its cache state), `kv_window` (a whole window from position 0, no cache: the steps past
the block) and `kv_constants` (the weights read transposed, once a generation), described by
the manifest's `web.kv_cache` (else `{"refused": why}`, and dlc.js recomputes the context
each token, as it does with `cache: false`).

MODEL is a `.dl` file (params from `weights`, else drawn from their initializers with
`seed`) or a compiled artifact folder (its model.dl, params.npz, state.npz and training
setup; it is compiled again, for GLSL ES). A model with a loss gets its training step with
the optimizer compiled in.
"""

from __future__ import annotations

import math
import os
import pathlib
from dataclasses import dataclass
from importlib import resources

import numpy as np

from dlc.compiler import decode, modes
from dlc.compiler.codegen.texture import TextureTargetError, packable_params
from dlc.compiler.emit import manifest, programs
from dlc.compiler.initializers import initial_value
from dlc.compiler.pipeline import compile_program
from dlc.generate import check_model
from dlc.model import compile as compile_model
from dlc.runtime import optimizers
from dlc.runtime.artifact.files import read_artifact, read_confined
from dlc.runtime.errors import DataError, DlcError
from dlc.runtime.folders import replaced_folder
from dlc.runtime.saved_names import by_param_name
from dlc.runtime.spec import manifest_json
from dlc.runtime.weights import checked_params, load_npz
from dlc.text import Vocab, vocab_path
from dlc.web import bundle as shader_bundle

STATIC = ("dlc.js", "index.html")
WEIGHTS = "weights.bin"
SHADERS = "shaders"
VOCAB = "vocab.json"
MAX_SOURCE_BYTES = 16 << 20  # an artifact's model.dl
KV_STEP, KV_WINDOW, KV_CONSTANTS = "kv_step", "kv_window", "kv_constants"  # the cache's programs
ES = {"es": True}  # GLSL ES 3.00 for WebGL2


def export_web(
    model_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    weights: str | os.PathLike | None = None,
    optimizer: str | None = None,
    lr: float | None = None,
    loss: str | None = None,
    seed: int = 0,
    vocab: str | os.PathLike | None = None,
) -> pathlib.Path:
    """Write the web export of `model_path` into `out_dir`; returns its path."""

    if lr is not None and not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise DlcError(f"lr must be a positive number, not {lr!r}")  # the manifest is JSON: no NaN
    path = pathlib.Path(model_path)
    compiled = None  # an artifact's manifest
    if path.is_dir():
        artifact = _read_artifact(path)
        compiled = artifact.manifest
        model = compile_model(artifact.source, name=str(path / "model.dl"))
    else:
        model = compile_model(path)
    graph = model.graph

    # The training step: the artifact's own setup, else the model's first loss (or `loss`).
    setup = (compiled or {}).get("train")
    train_loss, opt, own_setup = None, None, False
    if setup and loss in (None, setup["loss"]) and optimizer in (None, setup["optimizer"]["name"]):
        train_loss, own_setup = setup["loss"], True  # its optimizer and state go on (lr may change)
        config = {k: v for k, v in setup["optimizer"].items() if k != "name"}
        if lr is not None:
            config["lr"] = float(lr)
        opt = optimizers.OPTIMIZERS[setup["optimizer"]["name"]](**config)
    elif graph.losses:
        train_loss = loss or graph.losses[0]
        if train_loss not in graph.losses:
            raise DlcError(f"the model has no loss '{loss}' (its losses: {', '.join(graph.losses)})")
        opt = optimizers.make(optimizer or "sgd", lr=lr)
    elif loss is not None or optimizer is not None or lr is not None:
        raise DlcError(f"{path} has no loss to train; --loss, --optimizer and --lr need one")

    try:
        progs = programs(model, train_loss=train_loss, optimizer=opt, target="texture", options=ES)
        # the params a training step can keep 4 values a texel (its SGD updates rendered 4 a
        # fragment): every program compiled again to read them so
        packed = packable_params(progs["train"].plan, ES) if "train" in progs else frozenset()
        options = {**ES, "packed_params": packed}
        if packed:
            progs = programs(model, train_loss=train_loss, optimizer=opt, target="texture", options=options)
    except TextureTargetError as e:  # WebGL2 has no compute shaders: the texture target or nothing
        raise DlcError(f"{path} cannot run in a browser: {e}") from None
    data = manifest(model, progs, opt, None)

    # The params: a weights file, the artifact's params.npz, or the initializers.
    saved_state: dict[str, np.ndarray] = {}
    if weights is not None:  # params, and model state where the file holds it (Session.save)
        values = by_param_name(load_npz(weights), {**model.params, **model.states})  # `0.weight`: saved_names
        missing = [n for n in model.params if n not in values]
        if missing:
            raise DataError(f"{weights}: param '{missing[0]}' is missing")
        try:
            saved_state = checked_params(values, {**model.params, **model.states})
        except DataError as e:
            raise DataError(f"{weights}: {e}") from None
        params = {n: v for n, v in saved_state.items() if n in model.params}
    elif compiled is not None:
        params = artifact.params
    else:
        params = {n: initial_value(graph.node(n).attr("init"), graph.node(n).shape, seed, n) for n in graph.params}
    params = checked_params(params, dict(model.params))
    states: dict[str, np.ndarray] = {}
    step = progs["train"].fusion.graph if "train" in progs else graph  # the model's state alone
    if step.states:
        saved = {**(artifact.state if own_setup else {}), **saved_state}
        for s in step.states:
            value = saved.get(s)
            if value is None or tuple(value.shape) != tuple(step.shape(s)):
                value = initial_value(step.node(s).attr("init"), step.node(s).shape, seed, s)
            states[s] = value

    text_vocab = _text_vocab(data, weights, vocab)
    kv_cache = None
    if text_vocab is not None:  # a language model with its block: the cache's rows
        kv_progs, kv_cache = _kv_programs(graph, text_vocab.block, options)
        progs.update(kv_progs)
        data["programs"].update({name: p.spec for name, p in kv_progs.items()})
    blob, offsets = _pack({**params, **states})
    shaders = shader_bundle.dumps(shader_bundle.make({f: t for p in progs.values() for f, t in p.sources.items()}))
    data["web"] = {
        "shaders": SHADERS,
        "bundle": {"file": shader_bundle.FILE, "bytes": len(shaders.encode("ascii"))},
        "weights": {"file": WEIGHTS, "bytes": len(blob), "leaves": offsets},
        "optimizer_lr": None if opt is None else float(opt.lr),
        "page": "text" if text_vocab is not None else _page_kind(data),
        "vocab": None if text_vocab is None else VOCAB,
        "kv_cache": kv_cache,
        "packed": sorted(packed),  # params stored 4 values a texel (RGBA32F, float i in texel i / 4)
    }
    return _write(pathlib.Path(out_dir), progs, data, blob, shaders, model.source, text_vocab)


@dataclass
class _Artifact:
    manifest: dict
    source: str  # its model.dl, ending in a newline (so dlc.compile takes it as text, never a path)
    params: dict[str, np.ndarray]
    state: dict[str, np.ndarray]


def _read_artifact(path: pathlib.Path) -> _Artifact:
    """An artifact folder read as `dlc eval` reads it (runtime/artifact/files.py: the manifest
    validated, the .npz files without pickles, their headers, shapes and values checked before
    use), and its model.dl confined and bounded like the rest."""
    if not (path / "manifest.json").is_file() or not (path / "model.dl").exists():
        raise DlcError(f"{path} is not a dlc artifact (it needs manifest.json and model.dl)")
    files = read_artifact(path)
    raw = read_confined(path, "model.dl", MAX_SOURCE_BYTES, str(path), "model")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DlcError(f"{path / 'model.dl'} is not UTF-8 text (byte {e.start})") from None
    return _Artifact(files.manifest, source if source.endswith("\n") else source + "\n", files.params, files.state)


def _pack(arrays: dict[str, np.ndarray]) -> tuple[bytes, dict[str, dict]]:
    """One little-endian float32 blob and each array's byte offset, count and shape."""
    parts, offsets, at = [], {}, 0
    for name, value in arrays.items():
        flat = np.ascontiguousarray(value, dtype="<f4").ravel()
        offsets[name] = {"offset": at, "count": int(flat.size), "shape": list(np.shape(value))}
        parts.append(flat.tobytes())
        at += flat.nbytes
    return b"".join(parts), offsets


def _text_vocab(data: dict, weights, vocab):
    """The vocabulary of a language model: `vocab`, else `W.vocab.json` beside the weights
    (None when there is none), read as `dlc generate` reads it and checked against the model:
    one character per logit, and the block generation crops the context to."""
    if vocab is None and (weights is None or not vocab_path(weights).is_file()):
        return None
    where = vocab if vocab is not None else vocab_path(weights)
    try:
        check_model(data["inputs"], data["tensors"])
    except DlcError as e:
        raise DlcError(f"{where} is the vocabulary of a language model, but {e}") from None
    text_vocab = Vocab.load(where)
    size = data["tensors"]["logits"][-1]
    if size != text_vocab.size:
        raise DlcError(f"{where} holds {text_vocab.size} characters, but the model's logits score {size} tokens")
    if text_vocab.block is None:
        raise DlcError(f"{where} has no block (the longest context to feed); dlc train writes it")
    return text_vocab


def _kv_programs(graph, block: int, options=ES) -> tuple[dict, dict]:
    """The key/value cache's programs (compiler/decode.py's decode step, window step and
    hoisted weights, compiled for WebGL2 as dlc/generate.py's KVCache compiles them for GL)
    and the manifest's `web.kv_cache`; none and {"refused": why} when the model has none.
    `options`: the export's (its packed params read as the other programs read them)."""
    try:
        d = decode.decode_graph(modes.eval_form(graph), block)
    except decode.NotIncremental as e:
        return {}, {"refused": str(e)}
    step, window = d.step, d.window
    try:
        progs = {
            KV_STEP: compile_program(
                step.graph, [step.logits], name=KV_STEP, updates=step.graph.updates, options=options, target="texture"
            ),
            KV_WINDOW: compile_program(
                window.graph, [window.logits], name=KV_WINDOW, options=options, target="texture"
            ),
        }
        if d.hoisted:
            progs[KV_CONSTANTS] = compile_program(
                d.constants, [], name=KV_CONSTANTS, updates=d.constants.updates, options=options, target="texture"
            )
    except TextureTargetError as e:
        return {}, {"refused": f"its decode step cannot run in a browser: {e}"}
    return progs, {
        "block": int(block),
        "step": KV_STEP,
        "window": KV_WINDOW,
        "constants": KV_CONSTANTS if d.hoisted else None,
        "position": decode.POS,
        "caches": {name: list(shape) for name, shape in d.caches},
        "hoisted": {name: list(shape) for name, shape in d.hoisted},
    }


def _page_kind(data: dict) -> str:
    """ "digits" when the page can draw the input: an input of 64 grey levels per example (8x8)
    and a `probs` tensor of 10 classes per example; else "generic"."""

    def per_example(shape) -> int | None:
        if not shape or not isinstance(shape[0], str) or any(isinstance(d, str) for d in shape[1:]):
            return None
        return int(np.prod(shape[1:], dtype=np.int64))

    pixels = data["inputs"].get("pixels")
    probs = data["tensors"].get("probs")
    if pixels is not None and probs is not None and per_example(pixels) == 64 and per_example(probs) == 10:
        return "digits"
    return "generic"


def _write(
    out: pathlib.Path, progs, data: dict, blob: bytes, shaders: str, source: str | None, vocab=None
) -> pathlib.Path:
    """Write the folder beside its destination, then move it into place (never half a folder)."""
    with replaced_folder(out, "a dlc web export", DlcError) as tmp:
        (tmp / SHADERS).mkdir()
        for prog in progs.values():
            for file, text in prog.sources.items():
                (tmp / SHADERS / file).write_text(text, encoding="ascii")
        (tmp / shader_bundle.FILE).write_text(shaders, encoding="ascii")
        (tmp / WEIGHTS).write_bytes(blob)
        (tmp / "manifest.json").write_text(manifest_json(data), encoding="utf-8")
        if source:
            (tmp / "model.dl").write_text(source, encoding="utf-8")
        if vocab is not None:
            vocab.save(tmp / VOCAB)
        static = resources.files("dlc.web") / "static"
        for name in STATIC:
            (tmp / name).write_bytes((static / name).read_bytes())
    return out
