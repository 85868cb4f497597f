"""The GPT training step's storage plan, on the host (no GPU): samples/char_gpt.dl at nanoGPT's
shakespeare_char size (batch 64 x 256, 6 layers, 384 dims) with bench_gpt.py's AdamW, fused
for a GPU of 16 storage blocks a compute shader (NVIDIA's), planned at B=64, T=256.

    python benchmarks/bench_plan_memory.py [--small] [--peak]

Prints the kernels, the planned bytes of temporaries (and with no reuse, and the most live at
once, which no slot assignment can beat), params, optimizer state, and what `Session.memory()`
adds on GL: snapshots, three copies of params and state (runtime/executor.py, SNAPSHOTS).
`--peak` lists the tensors live at the plan's peak, grouped by op and shape.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SNAPSHOTS = 3  # runtime/executor.py: the ring of params + state copies training keeps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="bench_gpt.py's tiny configuration")
    ap.add_argument("--peak", action="store_true", help="list the tensors live at the peak")
    args = ap.parse_args()

    from bench_gpt import FULL, SMALL, model_source

    import dlc
    from dlc import schedules
    from dlc.compiler.fusion import fuse
    from dlc.compiler.limits import capabilities
    from dlc.compiler.plan import plan, size_of
    from dlc.compiler.train_graph import build_train_graph
    from dlc.runtime.dims import eval_size

    cfg = SMALL if args.small else FULL
    model = dlc.compile(model_source(cfg))
    opt = dlc.AdamW(
        1e-3,
        beta2=0.99,
        weight_decay=0.1,
        clip_norm=1.0,
        schedule=schedules.Cosine(warmup=100, decay_steps=5000, min_lr=1e-4),
    )
    step = build_train_graph(model.graph, None, opt)
    caps = capabilities("compute", {"max_compute_ssbo_blocks": 16, "max_ssbo_bindings": 16})
    f = fuse(step, [step.names[step.losses[0]]], step.updates, caps=caps)
    dims = {"B": cfg["B"], "T": cfg["BLOCK"]}
    p = plan(f, dims)
    peak = p.peak_bytes()

    def nbytes(t: int) -> int:
        return 4 * eval_size(size_of(step.nodes[t].shape), dims)

    live = [0] * (len(f.kernels) + 1)
    for t, (first, last) in p.live.items():
        for k in range(first, last + 1):
            live[k] += nbytes(t)
    at = max(range(len(live)), key=live.__getitem__)
    mib = 2**20
    leaves = peak["param"] + peak["state"] + peak["input"] + peak["const"]
    total = peak["planned"] + leaves
    snaps = SNAPSHOTS * (peak["param"] + peak["state"])
    print(f"config {cfg}")
    print(f"kernels {len(f.kernels)}")
    print(
        f"temporaries: planned {peak['planned'] / mib:.1f} MiB, most live at once {live[at] / mib:.1f} "
        f"(kernel {at}), no reuse {peak['no_reuse'] / mib:.1f}"
    )
    print(
        f"params {peak['param'] / mib:.1f} MiB, optimizer state {peak['state'] / mib:.1f}, "
        f"inputs and consts {(peak['input'] + peak['const']) / mib:.1f}"
    )
    print(
        f"plan total {total / mib:.1f} MiB; with the snapshots Session.memory() counts "
        f"({SNAPSHOTS} x params and state) {(total + snaps) / mib:.1f}"
    )
    if args.peak:
        groups: Counter = Counter()
        counts: Counter = Counter()
        for t, (first, last) in p.live.items():
            if first <= at <= last:
                key = (step.nodes[t].op, tuple(step.nodes[t].shape))
                groups[key] += nbytes(t)
                counts[key] += 1
        print(f"live at kernel {at}:")
        for (op, shape), b in groups.most_common():
            print(f"  {b / mib:8.1f} MiB  {counts[op, shape]:3d} x {op} {list(shape)}")


if __name__ == "__main__":
    main()
