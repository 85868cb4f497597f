"""Debug mode (the seeds' `enableDebugMode`): time every kernel, stop at the first NaN.

    dlc.set_debug(True)        # or env DLC_DEBUG=1, or `dlc train --debug-kernels`

While on, every kernel is timed (GL timer queries on the GPU; the wall clock on numpy) and
logged on the `dlc.debug` logger with its name, milliseconds, output shape and size; its
output is read back and checked for NaN, and the first NaN raises `NaNFound` naming the op
and the `.dl` line (or, for eager ops, the Python line) it came from. `summary()` is a table
of time per op; it is also printed on stderr when the process exits.

Covered: eager ops (`dlc.ops`, Array methods) on both devices, one record per op; Session
eval / gradients / train on the numpy backend (each IR node is one kernel there) and on the GL
backend (each fused GLSL kernel). On GL the Session's kernels are compiled with NaN checks: every
value a kernel computes, intermediate ones included, is tested and a NaN sets its IR node's flag
in a small buffer read after the launch, so a NaN that a later op of the same kernel hides
(`where(x > 0, sqrt(x), 0)`, `sqrt(x) * 0`) still stops the run, naming the first node that
made one. Kernels without flags (artifacts) have their outputs checked, and a NaN there is
traced to its node by re-running the kernel's nodes in NumPy on its inputs read back. Debug
mode is slow: every kernel waits for the GPU and is read back.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .runtime import dims as dim_algebra
from .runtime.errors import Loc, RuntimeFailure, format_shape
from .runtime.optional import require

log = logging.getLogger("dlc.debug")

_enabled = os.environ.get("DLC_DEBUG", "") == "1"
_records: list[Record] = []
_summarized = True  # nothing new to print at exit
_atexit_registered = False


@dataclass(frozen=True)
class Record:
    """One timed kernel."""

    name: str  # the op (or the fused kernel's name)
    ms: float
    shape: tuple[int, ...]
    size: int
    where: str  # file:line it came from, or ""
    device: str  # "gl" or "numpy"


class NaNFound(RuntimeFailure):
    """A kernel produced NaN (debug mode): `op` made it, at `loc` in the model or script."""

    def __init__(self, op: str, loc: Loc | None, detail: str = ""):
        self.op = op
        self.loc = loc
        where = f" at {loc}" if loc is not None else ""
        caret = loc.caret() if loc is not None else ""
        super().__init__(f"NaN in the output of {op}{where}{detail}{caret}")


class IndexOutOfRange(RuntimeFailure):
    """An index out of range (debug mode): GL clamps it, debug mode names the op."""

    def __init__(self, op: str, loc: Loc | None, detail: str = ""):
        where = f" at {loc}" if loc is not None else ""
        caret = loc.caret() if loc is not None else ""
        super().__init__(f"{op}{where}{detail} (GL clamps it to the nearest row){caret}")


# The ops that read a row by an i32 index -> the number of rows there (for debug mode's check).
INDEXED = {
    "gather": lambda g, n: g.nodes[n.inputs[0]].shape[n.attr("axis")],
    "pick": lambda g, n: g.nodes[n.inputs[0]].shape[-1],
    "gather_grad": lambda g, n: n.shape[n.attr("axis")],
}


# -- switching ---------------------------------------------------------------------------


def set_debug(on: bool = True) -> None:
    """Turn debug mode on or off (env DLC_DEBUG=1 turns it on at import).

    >>> dlc.set_debug(True)  # time every kernel, stop at the first NaN
    """
    enable() if on else disable()


def enable() -> None:
    """Debug mode on: for the CLI's `--debug-kernels`, then print `summary()` at the end."""
    global _enabled, _atexit_registered
    _enabled = True
    if not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("dlc debug: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
    if not _atexit_registered:
        atexit.register(_print_at_exit)
        _atexit_registered = True


def disable() -> None:
    global _enabled
    _enabled = False


def enabled() -> bool:
    return _enabled


# -- the profile -------------------------------------------------------------------------


def records() -> list[Record]:
    """Every kernel timed since the last `reset()`."""
    return list(_records)


def reset() -> None:
    global _summarized
    _records.clear()
    _summarized = True


def record(name: str, ms: float, shape: Iterable[int], where: str = "", device: str = "", width: int = 24) -> None:
    """Log one kernel and keep it for the summary (the GL executor calls this too). `width`:
    the name column's, the longest kernel name of the program, so the log lines align."""
    global _summarized
    shape = tuple(int(d) for d in shape)
    size = int(np.prod(shape, dtype=np.int64))
    _records.append(Record(name, ms, shape, size, where, device))
    _summarized = False
    log.info(
        "%-*s %9.3f ms  out %-16s %10d %s%s",
        max(width, len(name)),
        name,
        ms,
        format_shape(shape),
        size,
        "value " if size == 1 else "values",
        f"  ({where})" if where else "",
    )


# -- timing GL kernels -----------------------------------------------------------------------
# GL timer queries time the GPU itself, but some drivers (Mesa's llvmpipe) answer 0 (or a
# nanosecond) for every query. Then the wall clock around the launch, with glFinish on both sides, times it instead
# (it includes the driver's overhead): the log says so once, and the summary's header too.

_wall_clock = False  # a timer query has read 0: GL kernels are timed by the wall clock


class KernelTimer:
    """Times one GL launch at a time: begin() before it, end() after, in milliseconds."""

    def __init__(self) -> None:
        # OpenGL on first use: debug mode on numpy needs none
        self._gl = require("dlc.runtime.gl").GL
        self._query = require("dlc.runtime.sync").TimerQuery()
        self._start = 0.0

    def begin(self) -> None:
        self._gl.glFinish()  # earlier work must not count
        self._start = time.perf_counter()
        if not _wall_clock:
            self._query.begin()

    def end(self) -> float:
        global _wall_clock
        if not _wall_clock:
            self._query.end()
        self._gl.glFinish()
        wall = (time.perf_counter() - self._start) * 1e3
        if not _wall_clock:
            ms = self._query.elapsed_ms()
            # No real launch takes under a microsecond of GPU time: such a reading, while
            # the wall clock saw the launch take a while, is a driver that does not time.
            if ms >= 1e-3 or wall < 0.02:
                return ms
            _wall_clock = True
            log.info(
                "GL timer queries read %.6f ms for a launch that took %.3f ms: timing "
                "kernels with the wall clock around glFinish instead",
                ms,
                wall,
            )
        return wall

    def delete(self) -> None:
        self._query.delete()


def timing_note() -> str:
    """How GL kernels were timed, when not by timer queries ("" otherwise)."""
    return "GL times: wall clock around glFinish (the driver's timer queries read 0)" if _wall_clock else ""


def summary() -> str:
    """A table of the kernels timed since `reset()`: calls, total and mean ms, share of time,
    largest output; the slowest op first."""
    global _summarized
    _summarized = True
    if not _records:
        return "dlc debug: no kernels ran"
    rows: dict[str, list[Record]] = {}
    for r in _records:
        rows.setdefault(r.name, []).append(r)
    total = sum(r.ms for r in _records) or 1e-12
    order = sorted(rows.items(), key=lambda kv: -sum(r.ms for r in kv[1]))
    width = max(12, *(len(name) for name in rows))
    lines = [timing_note()] if timing_note() else []
    lines += [
        f"{'op':<{width}} {'calls':>7} {'total ms':>10} {'mean ms':>9} {'share':>7} {'largest out':>12}",
        "-" * (width + 50),
    ]
    for name, rs in order:
        t = sum(r.ms for r in rs)
        lines.append(
            f"{name:<{width}} {len(rs):>7} {t:>10.3f} {t / len(rs):>9.4f} {100 * t / total:>6.1f}% "
            f"{max(r.size for r in rs):>12}"
        )
    lines.append("-" * (width + 50))
    lines.append(f"{'all':<{width}} {len(_records):>7} {total:>10.3f}")
    return "\n".join(lines)


def _print_at_exit() -> None:
    if _enabled and not _summarized and _records:
        print("dlc debug: kernel profile\n" + summary(), file=sys.stderr)


# -- eager ops ---------------------------------------------------------------------------


def run_eager(device: Any, kernel: Any, handles: list[Any], loc: Loc | None) -> Any:
    """Run one eager kernel timed, log it, and stop if its output holds a NaN."""
    if device.name == "gl":
        timer = KernelTimer()
        try:
            timer.begin()
            out = device.run(kernel, handles)
            ms = timer.end()
        finally:
            timer.delete()
    else:
        start = time.perf_counter()
        out = device.run(kernel, handles)
        ms = (time.perf_counter() - start) * 1e3
    where = f"{loc.file}:{loc.line}" if loc is not None else ""
    record(kernel.name, ms, kernel.shape, where, device.name)
    values = device.download(out, kernel.shape)
    if np.isnan(values).any():
        device.free(out)
        inputs_nan = any(
            np.isnan(device.download(h, kernel.graph.node(n).shape)).any() for h, n in zip(handles, kernel.arg_names)
        )
        detail = " (an input already held NaN)" if inputs_nan else ""
        raise NaNFound(kernel.name, loc, detail)
    return out


# -- the numpy backend: one IR node at a time ---------------------------------------------


def evaluate(
    graph: Any, roots: Iterable[int], leaves: Mapping[str, np.ndarray], dims: Mapping[str, int], dtype: Any = np.float32
) -> dict[int, np.ndarray]:
    """`dlc.compiler.reference.evaluate`, timing each node and stopping at the first NaN."""
    reference_evaluate = require("dlc.compiler.reference").evaluate  # an artifact's debug mode has no compiler

    def on_node(i: int, out: np.ndarray, seconds: float) -> None:
        n = graph.nodes[i]
        if n.op == "const":
            return
        where = f"{n.loc.file}:{n.loc.line}" if n.loc is not None else ""
        record(n.op, seconds * 1e3, out.shape, where, "numpy")
        if np.isnan(out).any():
            label = graph.label(i)
            named = f" (node '{label}')" if not label.startswith("%") else f" (node {label})"
            raise NaNFound(n.op, n.loc, named)

    return reference_evaluate(graph, roots, leaves, dims, dtype, on_node)


# -- the GL backend: one fused kernel at a time --------------------------------------------


class GLHook:
    """The executor's per-launch hook (runtime/executor.py): a GL timer query around each
    launch, then its outputs read back and checked for NaN."""

    def __init__(self, graph: Any = None, fusion: Any = None, executor: Any = None):
        self.graph, self.fusion, self.executor = graph, fusion, executor
        self._timer: Any = None

    def before(self, name: str) -> None:
        if self._flags(name) is not None:
            self.executor.nan_buffer.fill_zero()
        if self._timer is None:
            self._timer = KernelTimer()
        self._timer.begin()

    def _flags(self, name: str) -> list[int] | None:
        """The nodes whose NaN flags kernel `name` sets (debug-mode codegen), or None."""
        ex = self.executor
        if ex is None or getattr(ex, "nan_buffer", None) is None:
            return None
        spec = next((k for k in ex.kernels if k.name == name), None)
        return spec.nan_flags if spec is not None else None

    def __call__(self, name: str, outputs: list[dict]) -> None:
        ms = self._timer.end() if self._timer is not None else 0.0
        first = outputs[0] if outputs else {}
        loc = self._loc(first.get("tensor"), first.get("locs"))
        kernels = getattr(self.executor, "kernels", None) or ()
        width = max((len(k.name) for k in kernels), default=24)
        record(name, ms, first.get("shape", ()), f"{loc.file}:{loc.line}" if loc else "", "gl", width)
        flags = self._flags(name)
        if flags:
            hit = np.flatnonzero(self.executor.nan_buffer.download(len(flags)))
            if hit.size:
                self._raise_flagged(name, min(int(flags[i]) for i in hit))
        self._check_indices(name)
        for out in outputs:
            if self._holds_ids(out.get("tensor")):  # an id's bits may look like a NaN
                continue
            values = out["buffer"].download(out["count"])
            if np.isnan(values).any():
                self._raise(name, out)

    def _check_indices(self, name: str) -> None:
        """An index out of range in a gather, a class id or gather's gradient, which GL clamps
        to the nearest row: named with its op's position (compute target, stored indices)."""
        ex, fusion = self.executor, self.fusion
        if fusion is None or not hasattr(ex, "slot_buffer"):
            return
        index = next((i for i, k in enumerate(ex.kernels) if k.name == name), None)
        g, dims = fusion.graph, dict(ex._dims or ())
        for m in fusion.kernels[index].nodes if index is not None else ():
            node = g.nodes[m]
            if node.op not in INDEXED:
                continue
            idx = node.inputs[1]
            info = ex.tensors.get(idx)
            if info is None:  # computed inline, not stored: not checked
                continue
            shape = dim_algebra.bind(info.shape, dims)
            ids = ex.slot_buffer(info.slot).download(int(np.prod(shape, dtype=np.int64))).view(np.int32)
            rows = dim_algebra.bind((INDEXED[node.op](g, node),), dims)[0]
            bad = np.flatnonzero((ids < 0) | (ids >= rows))
            if bad.size:
                at = [int(k) for k in np.unravel_index(bad[0], shape)]
                raise IndexOutOfRange(
                    node.op, node.loc, f": index {int(ids[bad[0]])} at position {at} is out of range [0, {rows})"
                )

    def _holds_ids(self, tensor: int | None) -> bool:
        g = self.fusion.graph if self.fusion is not None else self.graph
        return g is not None and tensor is not None and g.dtypes[tensor] == "i32"

    def _loc(self, tensor: int | None, locs: list | None) -> Loc | None:
        if self.graph is not None and tensor is not None:
            return self.graph.nodes[tensor].loc
        found = [x for x in locs or () if x]
        return Loc(*found[-1]) if found else None

    def _raise(self, name: str, out: dict) -> None:
        """Name the first node of the kernel whose value is NaN (found on the CPU), else the
        kernel's output."""
        culprit = None
        try:
            culprit = self._first_nan_node(name)
        except Exception:  # tracing is best effort: the kernel's output is still named
            culprit = None
        if culprit is not None:
            n = self.graph.nodes[culprit]
            label = self.graph.label(culprit)
            raise NaNFound(n.op, n.loc, f" (node '{label}', in kernel {name})")
        label = out.get("label", "?")
        raise NaNFound(f"kernel {name}", self._loc(out.get("tensor"), out.get("locs")), f" (writing '{label}')")

    def _raise_flagged(self, name: str, node: int) -> None:
        """Node `node` (the kernel's first to be NaN somewhere) is named, and whether the NaN
        came in with the kernel's inputs."""
        g = self.fusion.graph if self.fusion is not None else self.graph
        n = g.nodes[node]
        came_in = self._inputs_hold_nan(name)
        detail = f" (node '{g.label(node)}', in kernel {name}"
        detail += "; an input of the kernel already held NaN)" if came_in else ")"
        raise NaNFound(n.op, n.loc, detail)

    def _inputs_hold_nan(self, name: str) -> bool:
        ex = self.executor
        spec = next(k for k in ex.kernels if k.name == name)
        dims = dict(ex._dims or ())
        for t in spec.reads:
            info = ex.tensors[t]
            count = int(np.prod(dim_algebra.bind(info.shape, dims), dtype=np.int64))
            if np.isnan(ex.slot_buffer(info.slot).download(count)).any():
                return True
        return False

    def _first_nan_node(self, name: str) -> int | None:
        ex, g = self.executor, self.graph
        if ex is None or g is None or self.fusion is None:
            return None  # an artifact: no IR to trace with (and no compiler to import)
        registry = require("dlc.compiler.registry")  # an artifact's debug mode has no compiler

        index = next(i for i, k in enumerate(ex.kernels) if k.name == name)
        kernel = self.fusion.kernels[index]
        dims = dict(ex._dims or ())
        values: dict[int, np.ndarray] = {}
        for t in kernel.inputs:
            info = ex.tensors[t]
            shape = dim_algebra.bind(info.shape, dims)
            values[t] = ex.slot_buffer(info.slot).download(int(np.prod(shape, dtype=np.int64))).reshape(shape)
            if np.isnan(values[t]).any():
                return None  # NaN came in: an earlier kernel's output, not this one's doing

        def value(i: int) -> np.ndarray:
            if i not in values:
                n = g.nodes[i]
                args = [value(j) for j in n.inputs]
                values[i] = np.asarray(registry.get(n.op).ref(args, dict(n.attrs), dims), np.float32)
            return values[i]

        with np.errstate(all="ignore"):
            for i in kernel.nodes:
                if np.isnan(value(i)).any():
                    return i
        return None


def gl_hook(graph: Any = None, fusion: Any = None, executor: Any = None) -> GLHook | None:
    """The hook a GL executor should run with now: a GLHook in debug mode, else None."""
    return GLHook(graph, fusion, executor) if _enabled else None


if _enabled:
    enable()
