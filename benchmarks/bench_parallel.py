"""Data-parallel scaling (dlc/distributed.py): throughput of 1, 2, 4 (and 8) ranks started by
mpiexec, weak scaling (the same batch per rank, so N ranks train a global batch N times
larger), and the all-reduce's share of a step.

    python benchmarks/bench_parallel.py [--ranks 1,2,4] [--backend gl|numpy] [--steps 30] [--models mlp,cnn]

Each row: examples a second over all ranks, the scaling efficiency (throughput of N ranks
over N times that of one), and the mean seconds of a step and of its all-reduce on rank 0.
On one machine of one GPU (or llvmpipe) the ranks share the device: the efficiency then
shows the cost of sharing, not of the method. Run it on a machine with N GPUs for the
numbers that matter (each rank takes device `local rank mod` the device count).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

MODELS = {
    # name: (model text, batch per rank, inputs maker)
    "mlp": (
        """
input x: [B, 784]
input label: [B]
param W1: [784, 512]
param b1: [512] = zeros
param W2: [512, 512]
param b2: [512] = zeros
param W3: [512, 10]
param b3: [10] = zeros
h = relu(relu(x @ W1 + b1) @ W2 + b2)
loss cost = softmax_cross_entropy(h @ W3 + b3, one_hot(label, 10))
""",
        256,
    ),
    "cnn": ("samples/cnn_digits.dl", 64),
}

# One rank's process: trains `steps` steps and prints rank 0's timings as JSON.
RANK = r"""
import json, sys, time
import numpy as np
import dlc
from dlc import distributed

name, source, per_rank, steps, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
world = distributed.init() if distributed.launched_by_mpi() else None
size = world.size if world else 1
model = dlc.compile(source)
rng = np.random.default_rng(0)
n = per_rank * size
if name == "mlp":
    data = {"x": rng.normal(size=(n, 784)).astype(np.float32), "label": rng.integers(0, 10, size=n).astype(np.float32)}
else:
    pixels = rng.uniform(0, 16, size=(n, 64)).astype(np.float32)
    data = {"pixels": pixels, "labels": rng.integers(0, 10, size=n).astype(np.float32)}
sess = dlc.Session(model, backend=backend, seed=0, parallel=world)
opt = dlc.Adam(1e-3)
sess.train(data, optimizer=opt, batch_size=n, steps=2)  # compile and warm up
reduce_s = 0.0
if world is not None:
    inner = world.allreduce
    def timed(buffer, what):
        global reduce_s
        t = time.perf_counter()
        out = inner(buffer, what)
        reduce_s += time.perf_counter() - t
        return out
    world.allreduce = timed
t = time.perf_counter()
sess.train(data, optimizer=opt, batch_size=n, steps=steps)
elapsed = time.perf_counter() - t
if world is None or world.rank == 0:
    print(json.dumps({"examples_per_s": n * steps / elapsed, "step_s": elapsed / steps, "reduce_s": reduce_s / steps}))
"""


def run(name: str, ranks: int, steps: int, backend: str) -> dict:
    source, per_rank = MODELS[name]
    cmd = [sys.executable, "-c", RANK, name, source, str(per_rank), str(steps), backend]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--backend", default="gl", choices=("gl", "numpy"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--models", default="mlp,cnn")
    args = ap.parse_args()
    ranks = [int(r) for r in args.ranks.split(",")]
    print(f"backend {args.backend}, {args.steps} steps, weak scaling (batch per rank fixed); {time.strftime('%F %T')}")
    print("| model | ranks | global batch | examples/s | efficiency | step ms | all-reduce ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        base = None
        for r in ranks:
            row = run(name, r, args.steps, args.backend)
            base = base or row["examples_per_s"] / r
            eff = row["examples_per_s"] / (r * base)
            print(
                f"| {name} | {r} | {MODELS[name][1] * r} | {row['examples_per_s']:,.0f} | {eff:.0%} | "
                f"{row['step_s'] * 1e3:.1f} | {row['reduce_s'] * 1e3:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
