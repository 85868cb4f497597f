"""Issue 14's rows for bench_gl.py: training steps through Session.train (losses read a
window at a time, and read every step as before), and a new process to its first MLP Adam
step with the program binary cache cold and warm; PyTorch beside them where it exists."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# A new process: import dlc, compile the MLP, make a GL session, run one Adam step.
FIRST_STEP = r"""
import time, sys
t0 = time.perf_counter()
import numpy as np
import dlc
model = dlc.compile(sys.argv[1])
rng = np.random.default_rng(0)
b = int(sys.argv[2])
data = {"x": rng.normal(size=(b, 784)).astype(np.float32),
        "label": rng.integers(0, 10, size=b).astype(np.float32)}
sess = dlc.Session(model, backend="gl", seed=0)
sess.train(data, optimizer=dlc.Adam(1e-3), batch_size=b, steps=1)
print(time.perf_counter() - t0)
"""


def per_step_ms(sess, feeds, opt, batch, steps: int, reps: int) -> float:
    """Median ms per step of `sess.train(steps=...)` (losses read as the session does)."""
    sess.train(feeds, optimizer=opt, batch_size=batch, steps=steps)  # compile, warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        sess.train(feeds, optimizer=opt, batch_size=batch, steps=steps)
        times.append((time.perf_counter() - t) / steps)
    return 1e3 * float(np.median(times))


def quadratic_rows(torch, reps: int, steps: int) -> list[dict]:
    import dlc

    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 11).astype(np.float32)
    feeds = {"x": x, "y_label": (0.5 * x * x - x + 2).astype(np.float32)}
    rows = []
    for label, window in (("losses read per window", 256), ("a read every step", 1)):
        sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
        sess.loss_read_steps = window
        ms = per_step_ms(sess, feeds, dlc.SGD(0.01), None, steps, reps)
        rows.append({"row": "quadratic step (11 points, SGD)", "impl": f"dlc GL Session.train, {label}", "ms": ms})
    if torch is not None:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        tx, ty = torch.from_numpy(feeds["x"]).to(dev), torch.from_numpy(feeds["y_label"]).to(dev)
        p = torch.zeros(3, device=dev, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = ((p[0] * tx * tx + p[1] * tx + p[2] - ty) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.item()

        rows.append(
            {
                "row": "quadratic step (11 points, SGD)",
                "impl": f"PyTorch eager ({dev}), loss.item() each step",
                "ms": _median_ms(step, steps, reps),
            }
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
        if torch is not None and torch.cuda.is_available():
            rows += _torch_compiled(torch, data, batch, opt_name, steps, reps)
    return rows


def _median_ms(step, steps: int, reps: int) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t) / steps)
    return 1e3 * float(np.median(times))


def _torch_compiled(torch, data, batch, opt_name, steps, reps) -> list[dict]:
    """torch.compile(mode="reduce-overhead") (CUDA graphs) of the MLP step; its loss read
    every step as eager's is."""
    nn, F = torch.nn, torch.nn.functional
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).cuda()
    opt = (
        torch.optim.SGD(net.parameters(), lr=0.01)
        if opt_name == "SGD"
        else torch.optim.Adam(net.parameters(), lr=1e-3, capturable=True)
    )
    x = torch.from_numpy(data["x"][:batch]).cuda()
    y = torch.from_numpy(data["label"][:batch]).long().cuda()

    def fwd_bwd():
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        return loss

    try:
        compiled = torch.compile(fwd_bwd, mode="reduce-overhead")

        def step():
            opt.zero_grad(set_to_none=False)
            loss = compiled()
            opt.step()
            return loss.item()

        ms = _median_ms(step, steps, reps)
    except Exception as exc:  # no compiler toolchain on the machine, say
        print(f"torch.compile failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return []
    return [
        {
            "row": f"mlp step {opt_name}",
            "impl": "PyTorch torch.compile(reduce-overhead) fwd+bwd, eager optimizer",
            "ms": ms,
        }
    ]


def first_step_rows(mlp_source: str, batch: int) -> list[dict]:
    """A new process to its first MLP Adam step: cold (empty dlc cache and empty driver
    shader caches), warm (the second run: both filled), and warm with dlc's binary cache
    off (the driver's own cache alone). The driver caches are moved to a fresh folder, not
    turned off: Mesa returns no program binaries with its cache disabled."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "mlp.dl")
        with open(model, "w") as f:
            f.write(mlp_source)
        env = {
            **os.environ,
            "DLC_CACHE_DIR": os.path.join(tmp, "cache"),
            "DLC_PROGRAM_BINARY_CACHE": "1",
            "__GL_SHADER_DISK_CACHE_PATH": os.path.join(tmp, "driver"),
            "MESA_SHADER_CACHE_DIR": os.path.join(tmp, "driver"),
        }
        os.makedirs(os.path.join(tmp, "driver"))
        for label in ("cold", "warm (second run)", "warm, dlc binary cache off"):
            if label.endswith("off"):
                env["DLC_PROGRAM_BINARY_CACHE"] = "0"
            t = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", FIRST_STEP, model, str(batch)], env=env, capture_output=True, text=True
            )
            wall = time.perf_counter() - t
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                continue
            inside = float(done.stdout.strip().splitlines()[-1])
            rows.append(
                {
                    "row": "new process to first MLP Adam step",
                    "impl": f"dlc GL, {label}",
                    "ms": 1e3 * wall,
                    "note": f"{1e3 * inside:.0f} ms after the interpreter started",
                }
            )
    return rows
