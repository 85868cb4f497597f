"""The README's table of the language's functions, generated from the registry.

    python -m dlc.compiler.optable            print the table
    python -m dlc.compiler.optable README.md  rewrite the table in README.md (between its markers)

tests/compiler/test_optable.py fails when README.md's table differs from this one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import registry

BEGIN = "<!-- op table: generated from compiler/registry.py by `python -m dlc.compiler.optable README.md` -->"
END = "<!-- end of op table -->"
GROUPS = ("elementwise", "linear algebra", "reductions", "shape", "networks", "costs")


def _default(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def signature(e) -> str:
    """`name(x, alpha=0.2)`; a parameter whose default is None is optional: `[perm]`."""
    parts = []
    for p in e.params:
        if p.default is registry.REQUIRED:
            parts.append(p.name)
        elif p.default is None:
            parts.append(f"[{p.name}]")
        else:
            parts.append(f"{p.name}={_default(p.default)}")
    return f"{e.name}({', '.join(parts)})"


def markdown() -> str:
    entries = registry.language_entries()
    unknown = {e.group for e in entries} - set(GROUPS)
    if unknown:
        raise ValueError(f"entries in groups the table does not know: {sorted(unknown)}")
    lines = ["| group | function | what |", "| --- | --- | --- |"]
    for group in GROUPS:
        for e in sorted((e for e in entries if e.group == group), key=lambda e: e.name):
            what = e.doc.replace("|", "\\|") + ("" if e.differentiable else " (not differentiable)")
            sig = signature(e).replace("|", "\\|")
            lines.append(f"| {group} | `{sig}` | {what} |")
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    """`text` (README.md) with the table between its markers replaced by `markdown()`."""
    try:
        head, rest = text.split(BEGIN + "\n", 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"README has no op table markers ({BEGIN} ... {END})") from None
    return head + BEGIN + "\n" + markdown() + END + tail


def main(argv: list[str]) -> int:
    if not argv:
        sys.stdout.write(markdown())
        return 0
    path = Path(argv[0])
    path.write_text(rewrite(path.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
