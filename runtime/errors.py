"""Errors users see, and the helpers that word them. Free of lark and the compiler so the
runtime can use them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


def did_you_mean(name: str, options: Iterable[str]) -> str:
    """ ", did you mean 'x'?" for the closest of `options`, or "" when none is close."""
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f", did you mean '{close[0]}'?" if close else ""


def format_shape(shape) -> str:
    """A shape as messages and dumps write it: [B, 64]."""
    return "[" + ", ".join(map(str, shape)) + "]"


@dataclass(frozen=True, slots=True)
class Loc:
    """A place in a model source: 1-based line and column, and the line's text."""

    file: str
    line: int
    column: int
    text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def caret(self) -> str:
        """The source line and a caret under the column (indented), or "" with no text."""
        if not self.text:
            return ""
        line = self.text.rstrip("\r\n")
        # A control character (a form feed, U+2028, ...) would move the terminal's cursor.
        line = "".join(c if c.isprintable() or c == "\t" else "?" for c in line)
        # Expand tabs so the caret lines up with what the terminal shows.
        prefix = line[: max(self.column - 1, 0)].expandtabs(4)
        return f"\n    {line.expandtabs(4)}\n    {' ' * len(prefix)}^"


class DlcError(Exception):
    """Base of every error dlc reports to a person (exit 1, no traceback).

    >>> try:
    ...     history = sess.fit(xs, ys, epochs=10)
    ... except dlc.DlcError as e:
    ...     print(e)
    """


class CompileError(DlcError):
    """A mistake in a model, located at file:line:col with the line and a caret; `message`,
    `line` and `column` (1-based; None when no place is known) hold the parts.

    >>> try:
    ...     dlc.compile("input x: [2]\\nloss l = mean(y)")
    ... except dlc.CompileError as e:
    ...     print(e.line, e.message)
    2 unknown name 'y'
    """

    def __init__(self, message: str, loc: Loc | None = None):
        self.message = message
        self.loc = loc
        self.line = loc.line if loc else None
        self.column = loc.column if loc else None
        super().__init__(self.format())

    def format(self) -> str:
        """The message as `str(error)` shows it: "file:line:col: error: ..." and the caret.

        >>> print(error.format())
        """
        if self.loc is None:
            return f"error: {self.message}"
        return f"{self.loc}: error: {self.message}{self.loc.caret()}"


class UsageError(DlcError):
    """A flag combination argparse cannot express; the CLI exits 2 like argparse's own errors."""


class DataError(DlcError):
    """Data that does not fit the model: names the input, the file and, for CSV, the line.

    >>> try:
    ...     sess.fit(xs_of_the_wrong_shape, ys)
    ... except dlc.DataError as e:
    ...     print(e)
    """


class RuntimeFailure(DlcError):
    """A failure while running (a NaN loss, a missing GL context, ...).

    >>> try:
    ...     devices = dlc.gl_devices()
    ... except dlc.RuntimeFailure as e:
    ...     print("no GPU:", e)
    """


class TrainingDiverged(RuntimeFailure):
    """The loss became NaN or infinite at `step` (counted from 1); the params were put
    back to the last ones whose loss was finite.

    >>> try:
    ...     sess.fit(xs, ys, epochs=10, optimizer=dlc.SGD(1e9))
    ... except dlc.TrainingDiverged as e:
    ...     print(e.step, e.loss)
    """

    def __init__(self, step: int, loss: float):
        self.step = step
        self.loss = loss
        super().__init__(
            f"training diverged at step {step}: the loss is {loss}; the params are "
            "back to the last ones with a finite loss"
        )
