"""dlc on GL against NumPy and PyTorch, in one process: prints a table (not a test).

    python benchmarks/bench_gl.py              # full sizes, for a GPU
    python benchmarks/bench_gl.py --small      # a quick run anywhere (Mesa llvmpipe too)

Rows:
- a fused chain of 8 elementwise ops over N floats (default 64M): GB/s counting one read and
  one write per element, next to the copy bandwidth of the same API (glCopyBufferSubData and
  a one-op compute kernel; torch's copy_);
- an fp32 matmul M x M x M (default 4096): TFLOP/s (PyTorch with TF32 off);
- an MLP 784-1024-1024-10 training step at batch B (default 1024), SGD and Adam: ms per step,
  each step uploading its batch and reading its loss back (PyTorch eager with the batch
  already on the GPU, and with it copied from the host);
- the MLP step's 8 matmul kernels (GPU time inside the step, epilogues fused) against
  cuBLAS's 8 bare products at the same sizes;
- the MLP training step's storage: temporaries as planned against no reuse;
- issue 14 (bench_train_loop.py): the quadratic and MLP steps through Session.train, losses
  read a window at a time against a read every step, PyTorch eager (and torch.compile with
  CUDA graphs on CUDA) beside them, and a new process to its first MLP Adam step, cold and
  with dlc's program binary cache warm.

GPU times of dlc kernels come from GL timer queries, PyTorch's from CUDA events; steps are
wall-clock, synchronized by reading the loss. Each figure is the median of --reps runs after
0.3 s of running the same work (the GPU clocks down in any gap). --json/--markdown write the
results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

MLP = """
input x: [B, 784]
input label: [B]
param W1: [784, 1024] = he
param b1: [1024]
param W2: [1024, 1024] = he
param b2: [1024]
param W3: [1024, 10] = glorot
param b3: [10]
h1 = relu(x @ W1 + b1)
h2 = relu(h1 @ W2 + b2)
logits = h2 @ W3 + b3
loss cost = softmax_cross_entropy(logits, one_hot(label, 10))
"""

# (m, k, n, ta, tb) of each product in MLP's training step at batch 1024 (the tuners time them)
MLP_SHAPES = {
    (1024, 784, 1024, False, False): "x @ W1",
    (1024, 1024, 1024, False, False): "h1 @ W2",
    (1024, 1024, 1024, False, True): "dh1 = dh2 @ W2^T",
    (784, 1024, 1024, True, False): "dW1 = x^T @ dh1",
    (1024, 1024, 1024, True, False): "dW2 = h1^T @ dh2",
    (1024, 1024, 10, False, False): "h2 @ W3",
    (1024, 1024, 10, True, False): "dW3 = h2^T @ dlogits",
    (1024, 10, 1024, False, True): "dh2 = dlogits @ W3^T",
}

CHAIN = "input x: [{n}]\ny = tanh(relu(x * 1.5 + 0.5) * 2.0 - 1.0) * 0.5 + x\n"  # 8 ops
CHEAP = "input x: [{n}]\ny = ((relu(x * 1.5 + 0.5) * 2.0 - 1.0) * 0.5 + x) * 0.25\n"  # 8 ops
COPY = "input x: [{n}]\ny = -x\n"


def chain_numpy(x):
    return (
        np.tanh(np.maximum(x * np.float32(1.5) + np.float32(0.5), 0) * np.float32(2.0) - np.float32(1.0))
        * np.float32(0.5)
        + x
    )


# -- timing helpers ----------------------------------------------------------------------------

WARM_S = 0.3  # seconds of running a workload before timing it (set by --small to 0.02)


def keep_busy(fn, sync, seconds: float) -> None:
    """Run `fn` for `seconds` so the GPU is at full clocks when timing starts (a gap of a
    shader compile or an upload is enough for the H200 to clock down)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(5):
            fn()
        sync()


def median_ms(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def gl_gpu_ms(launch, reps: int, warmup: int = 3) -> float:
    """Median GPU time of `launch()` by GL timer queries; where the driver's timer reads
    nothing plausible (llvmpipe), wall-clock time of launch + glFinish instead."""
    from dlc.runtime.gl import GL
    from dlc.runtime.sync import TimerQuery

    for _ in range(warmup):
        launch()
    keep_busy(launch, GL.glFinish, WARM_S)
    q = TimerQuery()
    times, walls = [], []
    for _ in range(reps):
        t = time.perf_counter()
        q.begin()
        launch()
        q.end()
        times.append(q.elapsed_ms())
        walls.append((time.perf_counter() - t) * 1e3)
    q.delete()
    timed = statistics.median(times)
    if timed < 1e-3:
        TIMER_NOTES.add("llvmpipe's timer queries read 0: GL rows are wall-clock with glFinish")

        def synced():
            launch()
            GL.glFinish()

        return median_ms(synced, reps, warmup=1)
    return timed


TIMER_NOTES: set[str] = set()
KERNEL_TABLES: dict[str, list[dict]] = {}


def torch_gpu_ms(torch, fn, reps: int, warmup: int = 3) -> float:
    if not torch.cuda.is_available():
        return median_ms(fn, reps, warmup)
    for _ in range(warmup):
        fn()
    keep_busy(fn, torch.cuda.synchronize, WARM_S)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def get_torch(skip: set[str]):
    if "torch" in skip:
        return None, "skipped"
    try:
        import torch
    except ImportError as exc:
        return None, f"not importable ({exc})"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def gl_program(source: str, options=None):
    import dlc
    from dlc.compiler.pipeline import compile_program
    from dlc.runtime.device import get_context
    from dlc.runtime.executor import Executor, LeafStore

    model = dlc.compile(source)
    g = model.graph
    # the matmul tuning table's row for this GPU, as the GL backend asks for it
    prog = compile_program(g, [g.names["y"]], options={"device": get_context().renderer, **(options or {})})
    return prog, Executor(prog.spec, prog.sources, LeafStore())


def warm_up(seconds: float) -> None:
    """Keep the GPU busy so its clocks are up before anything is timed (without this, the
    first rows of a run on the H200 read a third of the bandwidth)."""
    from dlc.runtime.gl import GL

    m = 2048
    _, ex = gl_program(f"input a: [{m}, {m}]\ninput b: [{m}, {m}]\ny = a @ b\n")
    rng = np.random.default_rng(0)
    ex.upload({"a": rng.normal(size=(m, m)).astype(np.float32), "b": rng.normal(size=(m, m)).astype(np.float32)}, {})
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            ex.launch()
        GL.glFinish()
    ex.delete()


# -- the rows ---------------------------------------------------------------------------------


def bench_chain(n: int, reps: int, torch, skip) -> list[dict]:
    from dlc.runtime.storage import Buffer

    rows = []
    nbytes = 2 * 4 * n
    x = np.random.default_rng(0).normal(size=n).astype(np.float32)
    prog, ex = gl_program(CHAIN.format(n=n))
    ex.upload({"x": x}, {})
    ms = gl_gpu_ms(ex.launch, reps)
    y = ex.run({"x": x}, {}, [prog.spec.roots[0]])[0]
    err = float(np.max(np.abs(y - chain_numpy(x))))
    rows.append(
        {
            "row": "chain",
            "impl": "dlc GL",
            "ms": ms,
            "GB/s": nbytes / ms / 1e6,
            "kernels": len(prog.kernels),
            "max_abs_err": err,
        }
    )
    ex.delete()
    prog, ex = gl_program(CHEAP.format(n=n))
    ex.upload({"x": x}, {})
    ms = gl_gpu_ms(ex.launch, reps)
    rows.append(
        {
            "row": "chain",
            "impl": "dlc GL, 8 ops without tanh",
            "ms": ms,
            "GB/s": nbytes / ms / 1e6,
            "kernels": len(prog.kernels),
        }
    )
    ex.delete()
    cprog, cex = gl_program(COPY.format(n=n))
    cex.upload({"x": x}, {})
    ms = gl_gpu_ms(cex.launch, reps)
    rows.append({"row": "copy", "impl": "dlc GL one-op kernel", "ms": ms, "GB/s": nbytes / ms / 1e6})
    src, dst = cex.buffers[0], Buffer(4 * n)
    ms = gl_gpu_ms(lambda: dst.copy_from(src, 4 * n), reps)
    rows.append({"row": "copy", "impl": "GL glCopyBufferSubData", "ms": ms, "GB/s": nbytes / ms / 1e6})
    dst.delete()
    cex.delete()
    if "numpy" not in skip:
        ms = median_ms(lambda: chain_numpy(x), max(2, reps // 10), warmup=1)
        rows.append({"row": "chain", "impl": "NumPy", "ms": ms, "GB/s": nbytes / ms / 1e6})
    if torch is not None:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        tx = torch.from_numpy(x).to(dev)

        def chain_t():
            return torch.tanh(torch.relu(tx * 1.5 + 0.5) * 2.0 - 1.0) * 0.5 + tx

        ms = torch_gpu_ms(torch, chain_t, reps)
        rows.append({"row": "chain", "impl": f"PyTorch eager ({dev})", "ms": ms, "GB/s": nbytes / ms / 1e6})
        out = torch.empty_like(tx)
        ms = torch_gpu_ms(torch, lambda: out.copy_(tx), reps)
        rows.append({"row": "copy", "impl": f"PyTorch copy_ ({dev})", "ms": ms, "GB/s": nbytes / ms / 1e6})
        del tx, out
    return rows


def bench_matmul(m: int, reps: int, torch, skip) -> list[dict]:
    rows = []
    flop = 2.0 * m**3
    rng = np.random.default_rng(1)
    a = rng.normal(size=(m, m)).astype(np.float32)
    b = rng.normal(size=(m, m)).astype(np.float32)
    source = f"input a: [{m}, {m}]\ninput b: [{m}, {m}]\ny = a @ b\n"
    if m <= 1024:
        ref = a.astype(np.float64) @ b.astype(np.float64)
    elif torch is not None and torch.cuda.is_available():
        ref = (torch.from_numpy(a).cuda().double() @ torch.from_numpy(b).cuda().double()).cpu()
        ref = ref.numpy()
    else:
        ref = None
    for variant in (None, "medium"):
        prog, ex = gl_program(source, {"matmul": variant} if variant else None)
        ex.upload({"a": a, "b": b}, {})
        ms = gl_gpu_ms(ex.launch, reps)
        y = ex.run({"a": a, "b": b}, {}, [prog.spec.roots[0]])[0]
        err = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref))) if ref is not None else None
        how = prog.kernels[0].source.split("\n")[1].split("], ")[-1]
        rows.append({"row": "matmul", "impl": f"dlc GL ({how})", "ms": ms, "TFLOP/s": flop / ms / 1e9, "rel_err": err})
        ex.delete()
    if "numpy" not in skip:
        ms = median_ms(lambda: a @ b, 2, warmup=1)
        rows.append({"row": "matmul", "impl": "NumPy (CPU BLAS)", "ms": ms, "TFLOP/s": flop / ms / 1e9})
    if torch is not None:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        ta, tb = torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)
        ms = torch_gpu_ms(torch, lambda: ta @ tb, reps)
        rows.append({"row": "matmul", "impl": f"PyTorch fp32, TF32 off ({dev})", "ms": ms, "TFLOP/s": flop / ms / 1e9})
        del ta, tb
    return rows


def mlp_data(batch: int, examples: int):
    rng = np.random.default_rng(2)
    return {
        "x": rng.normal(size=(examples, 784)).astype(np.float32),
        "label": rng.integers(0, 10, size=examples).astype(np.float32),
    }


def bench_mlp(batch: int, reps: int, torch, skip) -> tuple[list[dict], list[dict]]:
    import dlc

    rows: list[dict] = []
    storage: list[dict] = []
    data = mlp_data(batch, 4 * batch)
    model = dlc.compile(MLP)
    for opt_name, opt in (("SGD", dlc.SGD(0.01)), ("Adam", dlc.Adam(1e-3))):
        rows += mlp_gl(model, data, batch, opt_name, opt, reps, storage)
        if "numpy" not in skip:
            ns = dlc.Session(model, backend="numpy", seed=0)
            one = {k: v[:batch] for k, v in data.items()}
            ms = median_ms(
                lambda ns=ns, one=one, opt=opt: ns.train(one, optimizer=opt, batch_size=batch, steps=1), 3, warmup=1
            )
            rows.append({"row": f"mlp step {opt_name}", "impl": "NumPy backend", "ms": ms})
        if torch is not None:
            rows += torch_mlp(torch, data, batch, opt_name, reps, storage)
    if torch is not None and torch.cuda.is_available() and batch == 1024:  # MLP_SHAPES's batch
        rows += mlp_product_rows(torch, reps)
    return rows, storage


def mlp_product_rows(torch, reps: int) -> list[dict]:
    """The GPU time of the MLP step's 8 matmul kernels (each timed alone inside the step, with
    its fused epilogue: bias, relu, the optimizer update) against cuBLAS's 8 bare products
    (`MLP_SHAPES`: batch 1024)."""
    shapes = list(MLP_SHAPES)
    flops = sum(2 * m * k * n for m, k, n, _, _ in shapes)
    rows = []
    for opt_name in ("SGD", "Adam"):
        table = KERNEL_TABLES.get(f"MLP {opt_name} step")
        if table:
            ms = sum(r["ms"] for r in table if "matmul" in r["kernel"])
            rows.append(
                {
                    "row": "mlp step products",
                    "impl": f"dlc GL, the {opt_name} step's 8 matmul kernels (GPU time, epilogues fused)",
                    "ms": ms,
                    "TFLOP/s": flops / ms / 1e9,
                }
            )
    torch.backends.cuda.matmul.allow_tf32 = False

    def operand(rows: int, cols: int, transposed: bool):
        return torch.randn(cols, rows, device="cuda").t() if transposed else torch.randn(rows, cols, device="cuda")

    pairs = [(operand(m, k, ta), operand(k, n, tb)) for m, k, n, ta, tb in shapes]
    ms = torch_gpu_ms(torch, lambda: [a @ b for a, b in pairs], reps)
    rows.append(
        {
            "row": "mlp step products",
            "impl": "PyTorch fp32 (cuBLAS, TF32 off), the 8 products",
            "ms": ms,
            "TFLOP/s": flops / ms / 1e9,
        }
    )
    return rows


def mlp_gl(model, data, batch, opt_name, opt, reps, storage) -> list[dict]:
    import dlc
    from dlc.compiler.pipeline import compile_program

    rows = []
    one = {k: v[:batch] for k, v in data.items()}
    sess = dlc.Session(model, backend="gl", seed=0)
    sess.train(one, optimizer=opt, batch_size=batch, steps=1)  # compiles, sets up the state
    backend = sess.backend
    step_graph = sess._train_graph(None, opt)
    loss = step_graph.names[step_graph.losses[0]]
    feeds = {**one, "$lr": np.asarray(opt.lr, np.float32)}
    dims = {"B": batch}
    compiled, ex = backend.program(step_graph, [loss], True, dims)

    def one_step():
        backend.step(step_graph, [loss], feeds, dims)

    keep_busy(one_step, lambda: None, WARM_S)
    ms = median_ms(one_step, reps)
    rows.append(
        {
            "row": f"mlp step {opt_name}",
            "impl": "dlc GL (backend.step: upload, kernels, loss read back)",
            "ms": ms,
            "kernels": len(compiled.kernels),
        }
    )
    rows.append(
        {"row": f"mlp step {opt_name}", "impl": "dlc GL kernels only (GPU time)", "ms": gl_gpu_ms(ex.launch, reps)}
    )
    rows += mlp_gl_resident(backend, step_graph, data, batch, opt_name, opt, reps)
    for resident in (False, True):
        sess.resident_data = resident
        sess.train(data, optimizer=opt, batch_size=batch, steps=5)  # compiles, warms up
        t = time.perf_counter()
        sess.train(data, optimizer=opt, batch_size=batch, steps=reps)
        how = "data on the GPU, rows staged" if resident else "batches uploaded"
        rows.append(
            {
                "row": f"mlp step {opt_name}",
                "impl": f"dlc GL Session.train, {how} (per step)",
                "ms": (time.perf_counter() - t) * 1e3 / reps,
            }
        )
    KERNEL_TABLES[f"MLP {opt_name} step"] = per_kernel(ex)
    if opt_name == "Adam":
        g = model.graph
        fwd = compile_program(g, [g.names["logits"], g.names["cost"]], ref_dims=dims)
        for what, prog in (("MLP forward (logits, cost)", fwd), ("MLP Adam step", compiled)):
            peak = prog.plan.peak_bytes(dims)
            storage.append({"what": f"{what} temporaries, planned", "MiB": peak["planned"] / 2**20})
            storage.append({"what": f"{what} temporaries, no reuse", "MiB": peak["no_reuse"] / 2**20})
        storage.append(
            {
                "what": "MLP Adam step params + optimizer state + inputs",
                "MiB": (peak["param"] + peak["state"] + peak["input"]) / 2**20,
            }
        )
    backend.close()
    return rows


def mlp_gl_resident(backend, step_graph, data, batch, opt_name, opt, reps) -> list[dict]:
    """The step Session.train runs with its data on the GPU: the batch gathered by index
    (compiler/resident.py), only the indices and $lr uploaded."""
    from dlc.compiler.resident import IDX, data_name, resident_graph

    n = len(data["x"])
    graph = resident_graph(step_graph, list(data), "B", n)
    loss = graph.names[graph.losses[0]]
    for name, v in data.items():
        backend.set_leaf(data_name(name), v, snapshot=False)
    rng = np.random.default_rng(3)
    feeds = {IDX: rng.permutation(n)[:batch].astype(np.float32), "$lr": np.asarray(opt.lr, np.float32)}
    dims = {"B": batch}
    compiled, ex = backend.program(graph, [loss], True, dims)

    def one_step():
        backend.step(graph, [loss], feeds, dims)

    keep_busy(one_step, lambda: None, WARM_S)
    row = f"mlp step {opt_name}"
    rows = [
        {
            "row": row,
            "impl": "dlc GL resident step (backend.step: upload the indices, gather + kernels, read the loss)",
            "ms": median_ms(one_step, reps),
            "kernels": len(compiled.kernels),
        },
        {"row": row, "impl": "dlc GL resident kernels only (GPU time)", "ms": gl_gpu_ms(ex.launch, reps)},
    ]
    for name in data:
        backend.drop_leaf(data_name(name))
    return rows


def deep_storage(batch: int) -> list[dict]:
    """Planned vs no-reuse temporaries of an 8-layer MLP's forward pass (no GPU needed)."""
    import dlc
    from dlc.compiler.pipeline import compile_program

    lines = ["input x: [B, 784]", "param W0: [784, 1024] = he", "param b0: [1024]", "h0 = relu(x @ W0 + b0)"]
    for k in range(1, 8):
        lines += [f"param W{k}: [1024, 1024] = he", f"param b{k}: [1024]", f"h{k} = relu(h{k - 1} @ W{k} + b{k})"]
    lines += ["param Wo: [1024, 10] = glorot", "y = h7 @ Wo"]
    g = dlc.compile("\n".join(lines) + "\n").graph
    peak = compile_program(g, [g.names["y"]], ref_dims={"B": batch}).plan.peak_bytes()
    return [
        {"what": "8-layer MLP forward temporaries, planned", "MiB": peak["planned"] / 2**20},
        {"what": "8-layer MLP forward temporaries, no reuse", "MiB": peak["no_reuse"] / 2**20},
    ]


class KernelTimes:
    """An executor hook timing every launch with a GL timer query (as debug mode can)."""

    def __init__(self) -> None:
        self.done: list = []
        self.current = None

    def before(self, name: str) -> None:
        from dlc.runtime.sync import TimerQuery

        self.current = (name, TimerQuery())
        self.current[1].begin()

    def __call__(self, name: str, outputs: list) -> None:
        self.current[1].end()
        self.done.append(self.current)

    def table(self) -> list[dict]:
        out = [{"kernel": name, "ms": q.elapsed_ms()} for name, q in self.done]
        for _, q in self.done:
            q.delete()
        return out


def per_kernel(ex, reps: int = 5) -> list[dict]:
    """Median GPU ms of each kernel of a program over `reps` runs."""
    runs = []
    for _ in range(reps):
        timer = KernelTimes()
        ex.hook = timer
        ex.launch()
        ex.hook = None
        runs.append(timer.table())
    return [{"kernel": r["kernel"], "ms": statistics.median(x[i]["ms"] for x in runs)} for i, r in enumerate(runs[0])]


def torch_mlp(torch, data, batch, opt_name, reps, storage) -> list[dict]:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    nn, F = torch.nn, torch.nn.functional
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
    opt = (
        torch.optim.SGD(net.parameters(), lr=0.01) if opt_name == "SGD" else torch.optim.Adam(net.parameters(), lr=1e-3)
    )
    x_host = torch.from_numpy(data["x"][:batch])
    y_host = torch.from_numpy(data["label"][:batch]).long()
    x, y = x_host.to(dev), y_host.to(dev)

    def step(x=x, y=y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    def step_from_host():
        return step(x_host.to(dev), y_host.to(dev))

    keep_busy(step, lambda: None, WARM_S)
    rows = [
        {
            "row": f"mlp step {opt_name}",
            "impl": f"PyTorch eager, batch on {dev}",
            "ms": median_ms(step, reps, warmup=3),
        },
        {
            "row": f"mlp step {opt_name}",
            "impl": f"PyTorch eager, batch from host ({dev})",
            "ms": median_ms(step_from_host, reps, warmup=3),
        },
    ]
    if dev == "cuda" and opt_name == "Adam":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        storage.append(
            {
                "what": "PyTorch eager Adam step: peak above what it holds",
                "MiB": (torch.cuda.max_memory_allocated() - base) / 2**20,
            }
        )
    return rows


# -- report ------------------------------------------------------------------------------------


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)


def table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="small sizes for a quick run")
    p.add_argument("--n", type=int, help="elements of the elementwise chain (64M)")
    p.add_argument("--mm", type=int, help="matmul size M (4096)")
    p.add_argument("--batch", type=int, help="MLP batch (1024)")
    p.add_argument("--reps", type=int, help="timed repetitions (20)")
    p.add_argument("--skip", default="", help="comma list of: numpy, torch, chain, matmul, mlp, conv, steps")
    p.add_argument("--cnn-batch", type=int, help="batch of the conv section's CNN step (256)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the tables here")
    args = p.parse_args(argv)
    small = args.small
    global WARM_S
    WARM_S = 0.02 if small else WARM_S
    n = args.n or (1 << 20 if small else 64 << 20)
    mm = args.mm or (256 if small else 4096)
    batch = args.batch or (64 if small else 1024)
    reps = args.reps or (5 if small else 20)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    from dlc.runtime.device import get_context

    ctx = get_context()
    torch, torch_device = get_torch(skip)
    head = {
        "gl_renderer": ctx.renderer,
        "gl_vendor": ctx.vendor,
        "gl_version": ctx.version,
        "torch": torch_device,
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "sizes": {"chain": n, "matmul": mm, "batch": batch},
        "reps": reps,
    }
    print(
        f"GL: {ctx.renderer} ({ctx.vendor}, {ctx.version}); PyTorch: {torch_device}; {os.cpu_count()} CPUs", flush=True
    )
    warm_up(0.2 if small else 2.0)
    rows: list[dict] = []
    storage: list[dict] = []
    failed: list[str] = []

    def section(name: str, fn) -> None:
        # One section failing (a driver refusing a shader, say) must not lose the others.
        if name in skip:
            return
        try:
            fn()
        except Exception:
            import traceback

            traceback.print_exc()
            failed.append(name)

    def chain() -> None:
        got = bench_chain(n, reps, torch, skip)
        rows.extend(got)
        print(table(got, ["row", "impl", "ms", "GB/s", "kernels", "max_abs_err"]), flush=True)

    def matmul() -> None:
        got = bench_matmul(mm, reps, torch, skip)
        rows.extend(got)
        print(table(got, ["row", "impl", "ms", "TFLOP/s", "rel_err"]), flush=True)

    def mlp() -> None:
        got, store = bench_mlp(batch, reps, torch, skip)
        rows.extend(got)
        storage.extend(store + deep_storage(batch))
        print(table(got, ["row", "impl", "ms", "TFLOP/s", "kernels"]), flush=True)
        print(table(storage, ["what", "MiB"]), flush=True)
        for name, kt in KERNEL_TABLES.items():
            print(f"{name}, GPU ms per kernel:")
            print(table(kt, ["kernel", "ms"]), flush=True)

    def conv() -> None:
        import bench_conv  # this folder is on sys.path when run as a script

        me = sys.modules[__name__]
        got = bench_conv.cnn_rows(me, args.cnn_batch or (16 if small else 256), reps, torch, skip)
        got += bench_conv.conv_kernel_rows(me, small, reps, torch, skip)
        rows.extend(got)
        print(table(got, ["row", "impl", "ms", "TFLOP/s", "kernels"]), flush=True)
        for name, kt in KERNEL_TABLES.items():
            if name.startswith("CNN"):
                print(f"{name}, GPU ms per kernel:")
                print(table(kt, ["kernel", "ms"]), flush=True)

    def steps() -> None:
        import bench_train_loop as tl

        got = tl.quadratic_rows(torch, reps, steps=200 if small else 1000)
        got += tl.eval_rows(MLP, torch, reps, calls=200 if small else 1000)
        got += tl.mlp_rows(MLP, mlp_data(batch, 4 * batch), batch, torch, reps, steps=8 if small else 100)
        got += tl.first_step_rows(MLP, batch)
        rows.extend(got)
        print(table(got, ["row", "impl", "ms", "note"]), flush=True)

    section("chain", chain)
    section("matmul", matmul)
    section("mlp", mlp)
    section("conv", conv)
    section("steps", steps)
    if failed:
        print("failed sections:", ", ".join(failed))
    for note in sorted(TIMER_NOTES):
        print("note:", note)
    result = {
        "machine": head,
        "rows": rows,
        "storage": storage,
        "notes": sorted(TIMER_NOTES),
        "kernels": KERNEL_TABLES,
        "failed": failed,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"GL renderer: {ctx.renderer} ({ctx.version}); PyTorch: {torch_device}\n\n")
            f.write(table(rows, ["row", "impl", "ms", "GB/s", "TFLOP/s", "kernels"]) + "\n\n")
            f.write(table(storage, ["what", "MiB"]) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
