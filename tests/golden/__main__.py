"""`python -m tests.golden --update` rewrites the golden files (and deletes those no model or
stage makes any more); without --update it compares and lists what differs (exit status 1)."""

from __future__ import annotations

import argparse
import sys

from dlc.compiler.pipeline import set_verify

from . import texts
from .compare import stale_files, unified_diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__)
    parser.add_argument("--update", action="store_true", help="write the expected files from the current compiler")
    parser.add_argument("--diff", action="store_true", help="without --update: print each difference")
    args = parser.parse_args(argv)
    old = set_verify(True)  # as the test suite does: every graph between stages is checked
    try:
        return _compare(args.update, args.diff)
    finally:
        set_verify(old)


def _compare(update: bool, show_diff: bool) -> int:
    changed = 0
    for model, name in texts.cases():
        path = texts.expected_path(model, name)
        now = texts.text(model, name)
        before = path.read_text(encoding="utf-8") if path.is_file() else None
        if now == before:
            continue
        changed += 1
        where = path.relative_to(texts.EXPECTED.parent)
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(now, encoding="utf-8")
            print(f"{'wrote' if before is not None else 'added'} {where}")
        elif show_diff:
            print(unified_diff(before or "", now, f"{model}/{name}.txt"), end="")
        else:
            print(f"{'differs' if before is not None else 'missing'}: {where}")
    for path in stale_files():
        changed += 1
        if update:
            path.unlink()
            if not any(path.parent.iterdir()):
                path.parent.rmdir()
            print(f"deleted {path.relative_to(texts.EXPECTED.parent)}")
        else:
            print(f"stale: {path.relative_to(texts.EXPECTED.parent)}")
    if not changed:
        print("golden files up to date")
    return 1 if changed and not update else 0


if __name__ == "__main__":
    sys.exit(main())
