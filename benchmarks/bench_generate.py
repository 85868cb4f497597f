"""Generation's speed on GL: tokens a second of sessions compiled under different codegen
options (alternating rounds, the same ids checked), and with --kernels where each step's GPU
time goes, launch by launch (GL timer queries). Not a test.

    python benchmarks/bench_generate.py --gpt full --tokens 500 --rounds 2 \\
        --options '{}' --options '{"attention_rows": 32}' --kernels
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import bench_startup
from bench_gl import KernelTimes


def sessions(text: str, block: int, variants: list[dict]) -> list:
    import dlc
    from dlc.backends.gl import GLBackend

    model = dlc.compile(text)
    out = []
    for options in variants:
        s = dlc.Session(model, backend=GLBackend(options), seed=0)
        t = time.perf_counter()
        s.generate([1], 2, block=block)  # compiles the decode step
        s.generate([1] * block, 2, block=block)  # and the window step
        print(f"options {json.dumps(options)}: compiled and warmed up in {time.perf_counter() - t:.1f} s", flush=True)
        out.append(s)
    return out


def rounds(sess: list, variants: list[dict], block: int, tokens: int, count: int) -> None:
    print("\n| round | options | ms a token | tokens / s | ids |\n| --- | --- | --- | --- | --- |")
    for r in range(count):
        for options, s in zip(variants, sess):
            t = time.perf_counter()
            ids = s.generate([1], tokens, block=block, temperature=0.8, top_k=10, seed=1)
            ms = (time.perf_counter() - t) / tokens * 1e3
            print(f"| {r} | {json.dumps(options)} | {ms:.3f} | {1e3 / ms:.0f} | {hash(tuple(ids)) & 0xFFFFFF:06x} |")


def kernels(s, block: int) -> None:
    """Each step's GPU time a token by kernel (its header), decode steps then window steps."""
    be = s.backend
    timers: dict[int, tuple] = {}
    program = be.program

    def timed(*args, **kwargs):
        compiled, ex = program(*args, **kwargs)
        if id(ex) not in timers:
            heads = {k.name: k.source.split("\n")[1].split(": ", 1)[-1][:110] for k in compiled.kernels}
            timers[id(ex)] = (KernelTimes(), heads)
        ex.hook = timers[id(ex)][0]
        return compiled, ex

    be.program = timed
    try:
        for span, prompt, n in (("decode steps", [1], 40), ("window steps", [1] * block, 20)):
            for tm, _ in timers.values():
                tm.done.clear()
            s.generate(prompt, n, block=block, temperature=0.8, top_k=10, seed=1)
            agg: dict = collections.defaultdict(lambda: [0.0, 0])
            for tm, heads in timers.values():
                for row in tm.table():
                    what = heads.get(row["kernel"], row["kernel"])
                    agg[what][0] += row["ms"] / n
                    agg[what][1] += 1 / n
            total = sum(ms for ms, _ in agg.values())
            launches = sum(c for _, c in agg.values())
            print(f"\n{span} (first prompt step included): {total:.3f} GPU ms a token over {launches:.0f} launches")
            print("| us a token | launches | kernel |\n| --- | --- | --- |")
            for what, (ms, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:16]:
                print(f"| {ms * 1e3:.1f} | {c:.1f} | {what} |")
    finally:
        be.program = program


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpt", choices=sorted(bench_startup.GPTS), default="full")
    p.add_argument("--tokens", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--options", action="append", type=json.loads, help="codegen options of a side (JSON); repeat")
    p.add_argument("--kernels", action="store_true", help="also time every launch of the first side's steps")
    args = p.parse_args(argv)
    variants = args.options or [{}]
    text, block = bench_startup.gpt_source(args.gpt)
    sess = sessions(text, block, variants)
    rounds(sess, variants, block, args.tokens, args.rounds)
    if args.kernels:
        kernels(sess[0], block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
