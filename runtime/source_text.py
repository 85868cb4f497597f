"""A model file's text: UTF-8, or a CompileError at the first byte that is not (its line and
column). Below the parser so that dlc.compile and an artifact's model.dl read text without
importing lark."""

from __future__ import annotations

from .errors import CompileError, Loc


def read_source(path: str) -> str:
    """The text of the model file `path`; bytes that are not UTF-8 are a CompileError at
    their line and column (OSError is the caller's)."""
    with open(path, "rb") as f:
        raw = f.read()
    return decode_source(raw, path)


def utf8_position(raw: bytes, start: int) -> tuple[int, int]:
    """The line and column (in characters, from 1) of byte `start` of `raw`, which is valid
    UTF-8 before it: where a decoder stopped. Every reader of text files names a bad byte so."""
    before = raw[:start].decode("utf-8", errors="replace")
    return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1


def decode_source(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line, column = utf8_position(raw, e.start)
        first = raw.rfind(b"\n", 0, e.start) + 1
        end = raw.find(b"\n", e.start)
        text = raw[first : end if end >= 0 else len(raw)]
        loc = Loc(file, line, column, text.decode("utf-8", errors="replace"))
        bad = " ".join(f"0x{b:02X}" for b in raw[e.start : e.end])
        raise CompileError(f"the file is not UTF-8 text: {bad} cannot be decoded ({e.reason})", loc) from None
