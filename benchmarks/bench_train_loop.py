"""Issue 14's rows for bench_gl.py: training steps through Session.train (losses read a
window at a time, and read every step as before), and a new process to its first MLP Adam
step with the program binary cache cold and warm; PyTorch beside them where it exists:
eager, and torch.compile of the whole step (forward, backward and optimizer step) with CUDA
graphs (mode="reduce-overhead") on CUDA, mode="default" on a CPU-only torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# A new process: import dlc, compile the MLP, make a GL session, run one Adam step. Its last
# line: the seconds since the interpreter started running it, split by phase, and which dlc
# it imported.
FIRST_STEP = r"""
import time, sys
t0 = time.perf_counter()
import json
import numpy as np
import dlc
t1 = time.perf_counter()
model = dlc.compile(sys.argv[1])
t2 = time.perf_counter()
rng = np.random.default_rng(0)
b = int(sys.argv[2])
data = {"x": rng.normal(size=(b, 784)).astype(np.float32),
        "label": rng.integers(0, 10, size=b).astype(np.float32)}
sess = dlc.Session(model, backend="gl", seed=0)
t3 = time.perf_counter()
sess.train(data, optimizer=dlc.Adam(1e-3), batch_size=b, steps=1)
t4 = time.perf_counter()
print(json.dumps({"seconds": t4 - t0, "phases": [t1 - t0, t2 - t1, t3 - t2, t4 - t3], "dlc": dlc.__file__,
                  "no_bytecode": bool(sys.flags.dont_write_bytecode)}))
"""
# what the phases are: the row's note says how long each took
PHASES = (
    "import numpy and dlc",
    "dlc.compile",
    "Session (GL imports, context, params)",
    "first step (codegen, programs, kernels)",
)


def per_step_ms(sess, feeds, opt, batch, steps: int, reps: int, shuffle: bool = True) -> float:
    """Median ms per step of `sess.train(steps=...)` (losses read as the session does)."""
    sess.train(feeds, optimizer=opt, batch_size=batch, steps=steps, shuffle=shuffle)  # compile, warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        sess.train(feeds, optimizer=opt, batch_size=batch, steps=steps, shuffle=shuffle)
        times.append((time.perf_counter() - t) / steps)
    return 1e3 * float(np.median(times))


def quadratic_rows(torch, reps: int, steps: int) -> list[dict]:
    import dlc

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 11).astype(np.float32)
    feeds = {"x": x, "y_label": (0.5 * x * x - x + 2).astype(np.float32)}
    rows = []
    # PyTorch's loop below takes the 11 points in one fixed order: so do the first rows.
    for label, window, shuffle in (
        ("losses read per window", 256, False),
        ("losses read per window, reshuffled each step", 256, True),
        ("a read every step", 1, False),
    ):
        sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
        sess.loss_read_steps = window
        ms = per_step_ms(sess, feeds, dlc.SGD(0.01), None, steps, reps, shuffle)
        rows.append({"row": "quadratic step (11 points, SGD)", "impl": f"dlc GL Session.train, {label}", "ms": ms})
    if torch is not None:
        dev = _torch_device(torch)
        tx, ty = torch.from_numpy(feeds["x"]).to(dev), torch.from_numpy(feeds["y_label"]).to(dev)
        p = torch.zeros(3, device=dev, requires_grad=True)

        def make():
            opt = torch.optim.SGD([p], lr=0.01)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = ((p[0] * tx * tx + p[1] * tx + p[2] - ty) ** 2).mean()
                loss.backward()
                opt.step()
                return loss

            return step

        rows += _torch_rows(torch, "quadratic step (11 points, SGD)", make, steps, reps)
    return rows


def eval_rows(mlp_source: str, torch, reps: int, calls: int) -> list[dict]:
    """Inference beside the training steps: `Session.eval` and `Session.predict` of the
    quadratic (11 points) and of the MLP at batch 1, each call feeding the inputs and
    reading the values back, against a training step of the quadratic (losses read per
    window); PyTorch eager's forward with the values read back (`.cpu()`) where it exists."""
    import dlc

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 11).astype(np.float32)
    quadratic = {"x": x, "y_label": (0.5 * x * x - x + 2).astype(np.float32)}
    sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
    rows = []
    row = "quadratic eval (11 points)"
    for label, call in (
        ("Session.eval('y')", lambda: sess.eval("y", {"x": x})),
        ("Session.predict (its outputs: y)", lambda: sess.predict({"x": x})),
        ("Session.eval(['y', 'cost'])", lambda: sess.eval(["y", "cost"], quadratic)),
    ):
        rows.append({"row": row, "impl": f"dlc GL {label}", "ms": _median_ms(call, calls, reps, warmup=20)})
    rows.append(
        {
            "row": row,
            "impl": "dlc GL Session.train step beside it (SGD, losses read per window)",
            "ms": per_step_ms(sess, quadratic, dlc.SGD(0.01), None, calls, reps, shuffle=False),
        }
    )
    mlp = dlc.Session(dlc.compile(mlp_source), backend="gl", seed=0)
    one = {"x": rng.normal(size=(1, 784)).astype(np.float32)}
    rows.append(
        {
            "row": "mlp eval (batch 1)",
            "impl": "dlc GL Session.predict (logits)",
            "ms": _median_ms(lambda: mlp.predict(one), calls, reps, warmup=20),
        }
    )
    if torch is not None:
        dev = _torch_device(torch)
        tx = torch.from_numpy(x).to(dev)
        p = torch.tensor([0.5, -1.0, 2.0], device=dev)

        def forward():
            with torch.no_grad():
                return (p[0] * tx * tx + p[1] * tx + p[2]).cpu()

        rows.append(
            {"row": row, "impl": f"PyTorch eager ({dev}), values read back", "ms": _median_ms(forward, calls, reps)}
        )
    return rows


def mlp_rows(mlp_source: str, data: dict, batch: int, torch, reps: int, steps: int) -> list[dict]:
    import dlc

    model = dlc.compile(mlp_source)
    rows = []
    for opt_name, make in (("SGD", lambda: dlc.SGD(0.01)), ("Adam", lambda: dlc.Adam(1e-3))):
        for label, window in (("losses read per window", 256), ("a read every step", 1)):
            sess = dlc.Session(model, backend="gl", seed=0)
            sess.loss_read_steps = window
            ms = per_step_ms(sess, data, make(), batch, steps, reps)
            rows.append({"row": f"mlp step {opt_name}", "impl": f"dlc GL Session.train, {label}", "ms": ms})
        if torch is not None:  # eager's rows are bench_gl.py's mlp section
            rows += _torch_rows(
                torch, f"mlp step {opt_name}", _torch_mlp_step(torch, data, batch, opt_name), steps, reps, eager=False
            )
    return rows


def _torch_device(torch) -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_mlp_step(torch, data: dict, batch: int, opt_name: str):
    """A maker of the MLP's training step in PyTorch (a fresh net and optimizer each call)."""
    nn, F = torch.nn, torch.nn.functional
    dev = _torch_device(torch)
    x = torch.from_numpy(data["x"][:batch]).to(dev)
    y = torch.from_numpy(data["label"][:batch]).long().to(dev)

    def make():
        net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(
            dev
        )
        if opt_name == "SGD":
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
        else:  # capturable: its step count stays on the GPU, so CUDA graphs can hold the update
            opt = torch.optim.Adam(net.parameters(), lr=1e-3, capturable=dev == "cuda")

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    return make


def _torch_rows(torch, row: str, make, steps: int, reps: int, eager: bool = True) -> list[dict]:
    """PyTorch eager (when `eager`) and torch.compile rows of one training step. `make()`
    returns a fresh step function (forward, backward, optimizer step; returns the loss);
    each step's loss is read with `.item()`, as dlc's rows read theirs. The compiled row
    compiles that whole function, as a PyTorch user would: on CUDA with
    mode="reduce-overhead" (CUDA graphs), marking each step's start
    (`torch.compiler.cudagraph_mark_step_begin`) so a replay may reuse the last step's
    buffers, and reading the loss before the next step; on a CPU-only torch with
    mode="default" (CUDA graphs need CUDA), said in the row's label."""
    dev = _torch_device(torch)
    rows = []
    if eager:
        step = make()
        rows.append(
            {
                "row": row,
                "impl": f"PyTorch eager ({dev}), loss.item() each step",
                "ms": _median_ms(lambda: step().item(), steps, reps),
            }
        )
    mode = "reduce-overhead" if dev == "cuda" else "default"
    try:
        compiled = torch.compile(make(), mode=mode)
        mark = torch.compiler.cudagraph_mark_step_begin if dev == "cuda" else None

        def compiled_step() -> float:
            if mark is not None:
                mark()
            return compiled().item()

        ms = _median_ms(compiled_step, steps, reps, warmup=5)  # the first calls compile and record
    except Exception as exc:  # no C++ compiler or Triton on the machine, say
        print(f"{row}: torch.compile(mode={mode!r}) failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return rows
    how = "CUDA graphs" if dev == "cuda" else "cpu: no CUDA, so no CUDA graphs"
    rows.append(
        {
            "row": row,
            "impl": f"PyTorch torch.compile(mode={mode!r}, {how}) of the whole step, loss.item() each step",
            "ms": ms,
        }
    )
    return rows


def _median_ms(step, steps: int, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t) / steps)
    return 1e3 * float(np.median(times))


def package_root() -> str:
    """The folder holding the `dlc` this process imported (the installed copy, or the
    checkout where it is installed editable)."""
    import dlc

    return os.path.dirname(os.path.dirname(os.path.abspath(dlc.__file__)))


def first_step_rows(mlp_source: str, batch: int, reps: int = 1) -> list[dict]:
    """A new process to its first MLP Adam step: cold (empty dlc cache and empty driver
    shader caches), warm (the second run: both filled), warm with dlc's binary cache off
    (the driver's own cache alone), and with dlc's compile cache off too (the model parsed
    and the programs generated again); `reps` rounds of the four, each row reported
    separately. The driver caches are moved to a fresh folder, not turned off: Mesa returns
    no program binaries with its cache disabled.

    The child imports exactly the dlc this process imported: its package root first on
    PYTHONPATH and its working directory a temporary folder (a checkout in the working
    directory would shadow an installed copy); it reports the dlc it imported, checked here."""
    import dlc

    want = os.path.abspath(dlc.__file__)
    rows = []
    for rep in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "mlp.dl")
            with open(model, "w") as f:
                f.write(mlp_source)
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH")) if p),
                "DLC_CACHE_DIR": os.path.join(tmp, "cache"),
                "DLC_PROGRAM_BINARY_CACHE": "1",
                "DLC_COMPILE_CACHE": "1",
                "__GL_SHADER_DISK_CACHE_PATH": os.path.join(tmp, "driver"),
                "MESA_SHADER_CACHE_DIR": os.path.join(tmp, "driver"),
            }
            os.makedirs(os.path.join(tmp, "driver"))
            for label in ("cold", "warm (second run)", "warm, dlc binary cache off", "warm, dlc compile cache off too"):
                if "binary cache off" in label:
                    env["DLC_PROGRAM_BINARY_CACHE"] = "0"
                if "compile cache off" in label:  # compiler/compile_cache.py: models and programs
                    env["DLC_PROGRAM_BINARY_CACHE"] = env["DLC_COMPILE_CACHE"] = "0"
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", FIRST_STEP, model, str(batch)],
                    env=env,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
                wall = time.perf_counter() - t
                got = _child_result(done)
                if got is None:
                    continue
                if os.path.abspath(got["dlc"]) != want:
                    print(f"first-step child imported {got['dlc']}, not {want}: row left out", file=sys.stderr)
                    continue
                rows.append(
                    {
                        "row": "new process to first MLP Adam step",
                        "impl": f"dlc GL, {label}" + (f" (round {rep + 1})" if reps > 1 else ""),
                        "ms": 1e3 * wall,
                        "note": f"{1e3 * got['seconds']:.0f} ms after the interpreter started: "
                        + ", ".join(f"{what} {1e3 * t:.0f}" for what, t in zip(PHASES, got["phases"]))
                        # PYTHONDONTWRITEBYTECODE: each process compiles every module from source
                        + ("; no bytecode cache (PYTHONDONTWRITEBYTECODE)" if got.get("no_bytecode") else ""),
                    }
                )
    return rows


def _child_result(done: subprocess.CompletedProcess) -> dict | None:
    """The first-step child's report, or None (its stderr's tail printed) when it failed."""
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            return json.loads(lines[-1])
        except ValueError:
            pass
    tail = "\n".join(done.stderr.strip().splitlines()[-25:])
    print(f"first-step child failed (exit {done.returncode}); its stderr ends:\n{tail}", file=sys.stderr)
    return None


def main(argv=None) -> int:
    """The inference rows and the new-process rows alone (bench_gl.py's steps section has
    them beside the training steps): `python benchmarks/bench_train_loop.py [--torch]`."""
    import argparse

    p = argparse.ArgumentParser(description="dlc inference calls and a new process to its first step")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (5)")
    p.add_argument("--calls", type=int, default=1000, help="calls a repetition (1000)")
    p.add_argument("--batch", type=int, default=1024, help="the first step's MLP batch (1024)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of the cold/warm processes (1)")
    p.add_argument("--torch", action="store_true", help="PyTorch eager's forward beside the eval rows")
    p.add_argument("--skip", default="", help="comma list of: eval, first-step")
    args = p.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_gl import MLP, table

    torch = None
    if args.torch:
        import torch
    skip = set(filter(None, args.skip.split(",")))
    rows = []
    if "eval" not in skip:
        rows += eval_rows(MLP, torch, args.reps, args.calls)
        print(table(rows, ["row", "impl", "ms"]), flush=True)
    if "first-step" not in skip:
        got = first_step_rows(MLP, args.batch, args.rounds)
        rows += got
        print(table(got, ["row", "impl", "ms", "note"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
