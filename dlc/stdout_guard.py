"""A closed stdout (`dlc ... | head -3`) ends the output quietly, never the work.

Unix tools stop printing when the reader goes away. `guard_stdout()` wraps
`sys.stdout` so that the first BrokenPipeError sends the rest of the output to
/dev/null (at the file descriptor too, so Python's final flush is silent); the
command goes on and, for `dlc train`, still saves its params.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


class GuardedStdout:
    """A text stream over `stream` that swallows a broken pipe and prints nothing after it."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        if self.closed_by_reader:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        if self.closed_by_reader:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        try:  # whatever is still buffered, and Python's flush at exit, go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def isatty(self) -> bool:
        return not self.closed_by_reader and self._stream.isatty()

    def __getattr__(self, name: str):  # encoding, fileno, ...: the wrapped stream's
        return getattr(self._stream, name)


def guard_stdout() -> GuardedStdout:
    """Wrap sys.stdout (once) and return the wrapper."""
    if not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)
    return sys.stdout
