"""Compile time against model size (issue "Never wrong, round 2", item 2).

samples/mlp_digits.dl with its first product `(pixels / 16) @ W1` chained N times
(`... @ W1 @ W1 ...`), compiled to its eval and train (SGD) programs by the compiler's stages
(`compiler/pipeline.py`), no GL: seconds per stage and in all, and the kernels made. Each
stage should grow linearly (or n log n) with N. `cpu_s` is the process's CPU time (steadier
than the wall clock on a shared machine); `--profile N` prints cProfile's top functions for
one length instead.

    python benchmarks/bench_compile.py [--lengths 200,400,800,1500] [--json] [--profile 800]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pathlib
import pstats
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def chained_source(n: int) -> str:
    """mlp_digits.dl with `@ W1` applied n times to the scaled pixels."""
    text = (ROOT / "samples" / "mlp_digits.dl").read_text()
    first = "(pixels / 16) @ W1"
    assert first in text, "samples/mlp_digits.dl changed: update bench_compile.py"
    return text.replace(first, "(pixels / 16)" + " @ W1" * n)


def compile_stages(n: int) -> dict:
    """Seconds of each stage compiling the chain of n products (eval and train programs)."""
    from dlc.compiler.pipeline import STAGES, Options, Work
    from dlc.runtime.optimizers import SGD

    work = Work(chained_source(n), f"mlp_digits_chain{n}.dl")
    options = Options(optimizer=SGD(0.1), verify=False)
    row: dict = {"length": n, "stages": {}}
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for name, stage in STAGES:
        t = time.process_time()
        stage(work, options)
        row["stages"][name] = round(time.process_time() - t, 3)
    row["cpu_s"] = round(time.process_time() - cpu0, 2)
    row["wall_s"] = round(time.perf_counter() - wall0, 2)
    row["kernels"] = {name: len(p.kernels) for name, p in work.programs.items()}
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="200,400,800,1500", help="chain lengths, comma-separated")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--profile", type=int, metavar="N", help="cProfile the compile of chain length N")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(compile_stages, args.profile)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return
    rows = []
    for n in (int(x) for x in args.lengths.split(",")):
        rows.append(compile_stages(n))
        if not args.json:
            r = rows[-1]
            if len(rows) == 1:
                print("| chain | kernels (eval, train) | " + " | ".join(r["stages"]) + " | cpu s | wall s |")
                print("|---" * (len(r["stages"]) + 4) + "|")
            stages = " | ".join(f"{v:.2f}" for v in r["stages"].values())
            kernels = f"{r['kernels'].get('eval')}, {r['kernels'].get('train')}"
            print(f"| {n} | {kernels} | {stages} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} |", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
