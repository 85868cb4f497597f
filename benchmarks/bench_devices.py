"""Two GL devices in one process: what switching between them costs (prints a table; not a test).

    python benchmarks/bench_devices.py            # MLP 784-1024-1024-10, batch 256
    python benchmarks/bench_devices.py --small    # a quick run anywhere (Mesa llvmpipe too)

Rows: eval steps of one session; of two sessions on the same device, alternating; of two
sessions on two devices (`dlc.open_gl_device`, EGL device 1 where there is one, else a second
context on the same GPU), alternating, so each step makes the other context current (glFlush
then eglMakeCurrent). Each figure is the median wall-clock milliseconds per step, after warm-up,
reading the result back (so each step waits for its GPU).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

MLP = """
input x: [B, {d}]
param W1: [{d}, {h}]
param b1: [{h}] = zeros
param W2: [{h}, {h}]
param b2: [{h}] = zeros
param W3: [{h}, 10]
out = (relu(relu(x @ W1 + b1) @ W2 + b2)) @ W3
"""


def per_step_ms(sessions: list, feeds: dict, reps: int) -> float:
    times = []
    for _ in range(2):  # warm-up: compile and allocate
        for sess in sessions:
            sess.eval("out", feeds)
    for _ in range(reps):
        start = time.perf_counter()
        for sess in sessions:
            sess.eval("out", feeds)
        times.append((time.perf_counter() - start) * 1e3 / len(sessions))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small sizes for a CPU renderer")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    d, h, batch = (64, 64, 16) if args.small else (784, 1024, 256)

    import dlc

    model = dlc.compile(MLP.format(d=d, h=h))
    feeds = {"x": np.random.default_rng(0).normal(size=(batch, d)).astype(np.float32)}
    first = dlc.gl_devices()[0]
    index = 1 if (first.context.device_count or 0) > 1 else None
    second = dlc.open_gl_device(index)
    with first:
        a, b = dlc.Session(model, backend="gl", seed=0), dlc.Session(model, backend="gl", seed=0)
    with second:
        c = dlc.Session(model, backend="gl", seed=0)
    np.testing.assert_allclose(a.eval("out", feeds), c.eval("out", feeds), rtol=1e-4, atol=1e-4)

    where = f"EGL device {index}" if index is not None else "a second context on the same GPU"
    print(f"{first.context.renderer}; second device: {where}; MLP {d}-{h}-{h}-10, batch {batch}")
    print(f"{'sessions':<40} {'ms / step':>10}")
    for label, sessions in (
        ("one", [a]),
        ("two on one device, alternating", [a, b]),
        ("two on two devices, alternating", [a, c]),
    ):
        print(f"{label:<40} {per_step_ms(sessions, feeds, args.reps):>10.3f}")
    second.close()


if __name__ == "__main__":
    main()
