"""Text data for language models: a character vocabulary and random windows of a corpus
(nanoGPT's `shakespeare_char` data, without a preparation step).

    data = dlc.TextData("samples/data/shakespeare.txt", block=256)
    data.vocab.size                     # distinct characters (76 for the shipped corpus)
    batch = data.batch(64, rng)         # {"tokens": int32 [64, 256], "targets": int32 [64, 256]}
    sess.train(data, optimizer=..., batch_size=64, steps=5000)   # random windows each step

The vocabulary is every character of the text, sorted by code point; ids are positions in
it. The last `val_fraction` (10%) of the text is held out for validation (`data.val`); each
batch is `batch_size` windows of `block + 1` characters starting at random offsets of the
training part, the first `block` as `tokens` and the last `block` (the shift by one) as
`targets`. A vocabulary is saved as JSON beside the weights (`W.npz` -> `W.vocab.json`) and
read back, checked, by every later command (`dlc generate`, `dlc eval`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from .data import Data
from .runtime.errors import DataError
from .runtime.source_text import utf8_position
from .runtime.weights import write_atomic

TOKENS, TARGETS = "tokens", "targets"  # the inputs a language model declares
MAX_TEXT_BYTES = 1 << 31  # a corpus is read whole: refuse more than 2 GiB
MAX_VOCAB = 1 << 20


class Vocab:
    """Characters and their ids."""

    def __init__(self, chars: Iterable[str], block: int | None = None) -> None:
        self.block = block  # the window length the model was trained on (None: not known)
        self.chars = list(chars)
        if not self.chars:
            raise DataError("a vocabulary needs at least one character")
        if len(self.chars) > MAX_VOCAB:
            raise DataError(f"a vocabulary of {len(self.chars)} characters: at most {MAX_VOCAB} are allowed")
        for c in self.chars:
            if not isinstance(c, str) or len(c) != 1:
                raise DataError(f"a vocabulary entry must be one character, not {c!r}")
        if len(set(self.chars)) != len(self.chars):
            raise DataError("a vocabulary lists a character twice")
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def of(cls, text: str) -> Vocab:
        return cls(sorted(set(text)))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str, where: str = "the text") -> np.ndarray:
        """int32 ids; a character outside the vocabulary is a DataError naming it."""
        try:
            return np.fromiter((self.ids[c] for c in text), dtype=np.int32, count=len(text))
        except KeyError as e:
            at = text.index(e.args[0])
            raise DataError(
                f"{where}: the character {e.args[0]!r} at position {at} is not in the model's vocabulary "
                f"({self.size} characters)"
            ) from None

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.size:
                raise DataError(f"token id {i} is outside the vocabulary (0..{self.size - 1})")
            out.append(self.chars[i])
        return "".join(out)

    # -- files -----------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        record = {"format": "dlc-vocab", "kind": "chars", "chars": self.chars, "block": self.block}
        text = json.dumps(record, ensure_ascii=True)
        write_atomic(path, lambda f: f.write(text.encode("ascii")))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocab:
        """A vocabulary file, checked (it is untrusted)."""
        path = Path(path)
        try:
            if path.stat().st_size > 64 * MAX_VOCAB:
                raise DataError(f"{path}: {path.stat().st_size} bytes is too large for a vocabulary file")
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path}: no such vocabulary file (dlc train writes it beside the weights)") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DataError(f"{path}: not a vocabulary file ({e})") from None
        if not isinstance(data, dict) or data.get("format") != "dlc-vocab" or data.get("kind") != "chars":
            raise DataError(f"{path}: not a dlc character vocabulary (format 'dlc-vocab', kind 'chars')")
        if not isinstance(data.get("chars"), list):
            raise DataError(f"{path}: 'chars' must be a list of characters")
        block = data.get("block")
        if block is not None and (type(block) is not int or not 1 <= block <= 1 << 24):
            raise DataError(f"{path}: 'block' must be a window length (a positive integer), not {block!r}")
        try:
            return cls(data["chars"], block)
        except DataError as e:
            raise DataError(f"{path}: {e}") from None


def vocab_path(weights: str | os.PathLike) -> Path:
    """Where the vocabulary of a weights file lives: `W.npz` -> `W.vocab.json`."""
    p = Path(weights)
    stem = p.name[: -len(".npz")] if p.name.endswith(".npz") else p.name
    return p.with_name(stem + ".vocab.json")


class TextData:
    """A corpus as ids, split into training and validation parts, drawn as random windows."""

    def __init__(
        self,
        source: str | os.PathLike,
        block: int,
        val_fraction: float = 0.1,
        vocab: Vocab | None = None,
        text: str | None = None,
    ) -> None:
        """`source` a text file (UTF-8), or a name for `text` given directly; `block` the
        window length (the model's T); `vocab` an existing vocabulary (e.g. the one a model
        was trained with), else one made from the text."""
        self.path = str(source)
        if text is None:
            text = read_text(source)
        if not isinstance(block, int) or block < 1:
            raise DataError(f"{self.path}: the block (window) length must be a positive integer, not {block!r}")
        if not 0.0 <= val_fraction < 1.0:
            raise DataError(f"{self.path}: val_fraction must be in [0, 1), not {val_fraction!r}")
        self.block = block
        self.vocab = vocab or Vocab.of(text)
        self.vocab.block = block
        ids = self.vocab.encode(text, self.path)
        cut = len(ids) - int(len(ids) * val_fraction)
        self.train_ids, self.val_ids = ids[:cut], ids[cut:]
        for part, name in ((self.train_ids, "training"), (self.val_ids if val_fraction else None, "validation")):
            if part is not None and len(part) < block + 1:
                raise DataError(
                    f"{self.path}: its {name} part has {len(part)} characters, fewer than a window of "
                    f"block + 1 = {block + 1}"
                )

    def batch(self, batch_size: int, rng: np.random.Generator, part: str = "train") -> dict[str, np.ndarray]:
        """`batch_size` windows at random offsets: {"tokens": [B, T], "targets": [B, T]}, int32."""
        ids = self.train_ids if part == "train" else self.val_ids
        starts = rng.integers(0, len(ids) - self.block, size=batch_size)
        rows = starts[:, None] + np.arange(self.block + 1)[None, :]
        windows = ids[rows]
        return {TOKENS: windows[:, :-1], TARGETS: windows[:, 1:]}

    def steps(self, first: int, count: int, batch_size: int, seed: int, part: str = "train") -> dict[str, np.ndarray]:
        """The batches of steps first .. first + count - 1, stacked along the batch axis
        ([count * batch_size, block] each). Step s draws its windows from a generator keyed by
        (seed, s) alone, so a run stopped at any step and resumed draws what it would have."""
        batches = [self.batch(batch_size, np.random.default_rng([seed, s]), part) for s in range(first, first + count)]
        return {k: np.concatenate([b[k] for b in batches]) for k in (TOKENS, TARGETS)}

    @property
    def val(self) -> TextData:
        """The validation part as its own data (its windows drawn from it alone)."""
        return _Part(self, self.val_ids)

    def __repr__(self) -> str:
        return (
            f"TextData({self.path!r}, block={self.block}, vocab={self.vocab.size} characters, "
            f"train={len(self.train_ids)}, val={len(self.val_ids)})"
        )


class _Part(TextData):
    def __init__(self, whole: TextData, ids: np.ndarray) -> None:
        self.path, self.block, self.vocab = whole.path + " (validation)", whole.block, whole.vocab
        self.train_ids, self.val_ids = ids, ids


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, whole (untrusted: its size is bounded, bad bytes are located)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_TEXT_BYTES:
            raise DataError(f"{path}: {size} bytes: a text corpus may hold at most {MAX_TEXT_BYTES} bytes")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a text file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read it ({e.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = utf8_position(raw, e.start)
        raise DataError(f"{path}:{line}:{col}: not UTF-8 text (byte 0x{raw[e.start]:02x})") from None


VAL_BATCHES = 20  # windows of the held-out part a validation loss averages over, in batches


def for_model(path: str, inputs: Mapping, dtypes: Mapping, block: int | None, batch_size: int, seed: int):
    """`dlc train MODEL --data corpus.txt`: the text as a model of `tokens`/`targets` i32 [B, T]
    inputs sees it: (the TextData, the validation windows as a `dlc.data.Data`). The block is
    T when the model fixes it, else `block` (--block)."""

    for name in (TOKENS, TARGETS):
        shape = inputs.get(name)
        if shape is None or len(shape) != 2 or dtypes.get(name) != "i32":
            raise DataError(
                f"{path}: training on text feeds windows as 'tokens' and their shift by one as 'targets'; "
                f"the model must declare both as i32[B, T] (it has: {', '.join(inputs) or 'no inputs'})"
            )
    fixed = inputs[TOKENS][1]
    if isinstance(fixed, int):
        if block is not None and block != fixed:
            raise DataError(f"--block {block}: the model's tokens are [B, {fixed}]")
        block = fixed
    if block is None:
        raise DataError(f"{path}: the model's window length is symbolic ({fixed}): give --block N")
    data = TextData(path, block)
    val = data.val.steps(0, VAL_BATCHES, batch_size, seed) if len(data.val_ids) > block else None
    n = VAL_BATCHES * batch_size
    return data, Data(f"{path} (last 10%)", val, {}, n) if val is not None else None


class TextRun:
    """What `dlc train` reports of a text run: the data it trains on, as a data file would."""

    def __init__(self, data: TextData) -> None:
        self.path, self.arrays, self.examples, self.dims = data.path, data, len(data.train_ids), {}
