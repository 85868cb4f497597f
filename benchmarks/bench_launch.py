"""Host time per launch (issue 14 item 2): what the CPU spends to issue one kernel, with
kernels so small that the GPU's own work is noise.

Rows:
  executor   a compiled program of many tiny kernels, launched again and again on data in
             place (`Executor.launch`): host microseconds per kernel launch
  step       a whole training step of the seeds' quadratic through `Executor.run(step=True)`
             (feeds upload, launches, updates, the loss read back): microseconds per step
  stubbed    the executor row with the GL entry points of the launch loop (the device's
             `fast`) swapped for a C function that does nothing: the Python loop's own cost,
             which llvmpipe's driver work (most of the rows above on it) hides
  eager      `a + b` on 8-element GL arrays (`dlc.ops` through dlc/backends/gl_eager.py), the result
             read by nothing and disposed: microseconds per op
  eager-stubbed  the eager row with the launch's entry points stubbed likewise
  chain      `((a + b) * c).relu()` on 8-element GL arrays in a loop, the results dropped
             (freed by their finalizers): microseconds per chain of three ops

Per launch (executor), step or op: `wall_us`, wall clock of the issuing loop with the queue
drained (glFinish) before and counted after; `cpu_us`, the issuing thread's CPU time (the
host work this item is about, without the driver's own threads). The least of `--reps` runs.

    python benchmarks/bench_launch.py [--reps 7] [--n 200] [--rows eager,chain]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import numpy as np

CHAIN_KERNELS = 24  # kernels of the executor row's program (each a reduction: no fusion)


def _chain_model() -> str:
    # Each sum of a matmul is its own kernel (a reduction ends a fused kernel); 8 x 8 data.
    lines = ["input x: [8, 8]", "h0 = x"]
    for i in range(1, CHAIN_KERNELS // 2 + 1):
        lines.append(f"h{i} = relu(h{i - 1} @ x) - sum(h{i - 1}, axis=1, keepdims=true)")
    lines.append(f"y = h{CHAIN_KERNELS // 2}")
    return "\n".join(lines) + "\n"


def timed(fn, n: int, reps: int) -> tuple[float, float]:
    """Least seconds per call of `fn` over `reps` runs of `n` calls (the least: other load on
    the machine only adds): wall clock (the final
    glFinish counted) and the calling thread's CPU time (the host's own issuing work, without
    the driver's worker threads; on a loaded machine the steadier of the two)."""
    from dlc.runtime.gl import GL

    fn()
    GL.glFinish()
    walls, cpus = [], []
    for _ in range(reps):
        GL.glFinish()
        t, c = time.perf_counter(), time.thread_time()
        for _ in range(n):
            fn()
        cpus.append((time.thread_time() - c) / n)
        GL.glFinish()
        walls.append((time.perf_counter() - t) / n)
    return min(walls), min(cpus)


def executor_row(n: int, reps: int) -> dict:
    import dlc
    from dlc.compiler.pipeline import compile_program
    from dlc.runtime.executor import Executor, LeafStore

    g = dlc.compile(_chain_model()).graph
    prog = compile_program(g, [g.names["y"]])
    ex = Executor(prog.spec, prog.sources, LeafStore())
    ex.upload({"x": np.full((8, 8), 0.01, np.float32)}, {})
    kernels = len(ex.kernels)
    wall, cpu = timed(ex.launch, n, reps)
    ex.delete()
    return {
        "row": "executor launch",
        "kernels": kernels,
        "wall_us": 1e6 * wall / kernels,
        "cpu_us": 1e6 * cpu / kernels,
    }


@contextlib.contextmanager
def _stubbed_entry_points():
    """The current device's raw GL entry points (`device.fast`, what the launch loops call)
    swapped for a no-op C call (libc's labs: on the x86-64 and arm64 C ABIs a callee ignores
    arguments it does not take), and back after."""
    import ctypes

    from dlc.runtime.device import current_device

    fast = current_device().fast
    fast.resolve()
    noop = ctypes.cast(ctypes.CDLL(None).labs, ctypes.c_void_p).value
    entries = {**fast._SIGNATURES, **fast._OPTIONAL}
    saved = {attr: getattr(fast, attr) for attr in entries}
    try:
        for attr, (_, argtypes) in entries.items():  # declared as Fast.resolve declares them
            declared = () if attr in fast._PLAIN_INTS else argtypes
            setattr(fast, attr, ctypes.CFUNCTYPE(None, *declared)(noop))
        yield
    finally:
        for attr, fn in saved.items():
            setattr(fast, attr, fn)


def stubbed_row(n: int, reps: int) -> dict:
    """The executor row with every GL entry point of the launch loop a no-op."""
    with _stubbed_entry_points():
        row = executor_row(n, reps)  # prepared after the swap: its calls are the no-ops
    return {**row, "row": "executor launch, GL calls stubbed"}


def step_row(n: int, reps: int) -> dict:
    import dlc
    from dlc.compiler.emit import programs
    from dlc.runtime.executor import Executor, LeafStore

    model = dlc.compile("samples/quadratic.dl")
    prog = programs(model, train_loss="cost", optimizer="sgd")["train"]
    store = LeafStore()
    for name in model.params:
        store.set(name, np.float32(0.5))
    for name in prog.fusion.graph.states:
        store.set(name, np.zeros(prog.fusion.graph.shape(name), np.float32))
    ex = Executor(prog.spec, prog.sources, store)
    loss = prog.fusion.roots[0]  # the step returns its loss first
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 11).astype(np.float32)
    feeds = {"x": x, "y_label": (0.5 * x * x - x + 2).astype(np.float32), "$lr": np.float32(1e-4)}
    wall, cpu = timed(lambda: ex.run(feeds, {"B": 11}, [loss], step=True), n, reps)
    ex.delete()
    store.delete()
    return {
        "row": "quadratic step (Executor.run)",
        "kernels": len(ex.kernels),
        "wall_us": 1e6 * wall,
        "cpu_us": 1e6 * cpu,
    }


def eager_row(n: int, reps: int) -> dict:
    import dlc

    a = dlc.array(np.arange(8, dtype=np.float32), backend="gl")
    b = dlc.array(np.ones(8, np.float32), backend="gl")
    (a + b).numpy()  # compiles the op

    def op():
        (a + b).dispose()

    wall, cpu = timed(op, n, reps)
    return {"row": "eager a + b (8 elements)", "wall_us": 1e6 * wall, "cpu_us": 1e6 * cpu}


def eager_stubbed_row(n: int, reps: int) -> dict:
    """The eager row with the launch's GL entry points no-ops: the host's own cost of an op
    (other GL calls, such as making a buffer, still run)."""
    import dlc

    dlc.array(np.ones(8, np.float32), backend="gl")  # the device, made before the swap
    with _stubbed_entry_points():
        row = eager_row(n, reps)
    return {**row, "row": "eager a + b, launch's GL calls stubbed"}


def chain_row(n: int, reps: int) -> dict:
    import dlc

    a = dlc.array(np.arange(8, dtype=np.float32), backend="gl")
    b = dlc.array(np.ones(8, np.float32), backend="gl")
    c = dlc.array(np.full(8, -0.5, np.float32), backend="gl")
    ((a + b) * c).relu().numpy()  # compiles the ops

    def chain():
        ((a + b) * c).relu()  # dropped at once: the arrays' finalizers free their buffers

    wall, cpu = timed(chain, n, reps)
    return {"row": "eager ((a + b) * c).relu() (8 elements)", "wall_us": 1e6 * wall, "cpu_us": 1e6 * cpu}


ROWS = {
    "executor": executor_row,
    "stubbed": stubbed_row,
    "step": step_row,
    "eager": eager_row,
    "eager-stubbed": eager_stubbed_row,
    "chain": chain_row,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"which rows, comma-separated (of {', '.join(ROWS)})")
    args = ap.parse_args()
    from dlc.runtime.device import get_context

    ctx = get_context()
    print(f"# {ctx.renderer if hasattr(ctx, 'renderer') else 'GL'}")
    names = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in names if r not in ROWS]
    if unknown:
        ap.error(f"unknown rows {', '.join(unknown)}: choose from {', '.join(ROWS)}")
    for row in (ROWS[name](args.n, args.reps) for name in names):
        if args.json:
            print(json.dumps(row))
        else:
            print("  ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
