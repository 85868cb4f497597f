"""Forced matmul variants on chosen products beside torch.matmul (CUDA, TF32 off), in one
process: prints ms, TFLOP/s, the ratio to cuBLAS, the error against a float64 product and the
kernel's header for each (not a test). Where tune_matmul.py searches a size class, this times
exactly the variants given: the probes behind the tuning table's notes.

    python benchmarks/probe_matmul.py                       # the GPT's forward products, a few variants
    python benchmarks/probe_matmul.py --small               # tiny products: checks the script anywhere
    python benchmarks/probe_matmul.py --shapes '[[16384, 1536, 384, 1, 0]]' \\
        --variants '[["table", null], ["128x128", {"blocking": [128, 128, 16, 8, 8], "warp": [4, 8]}]]'

A shape is [m, k, n] or [m, k, n, ta, tb] (an operand stored transposed: A as [k, m], B as
[n, k]); a variant is [label, literal], the literal a codegen option `matmul_variant` (a
blocking and switches, compiler/codegen/matmul_tuning.py's Variant) or null for the table's
choice on this device. Each is compiled through the real codegen, checked against float64 and
timed by GL timer queries (tune_matmul.Product).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tune_matmul  # noqa: E402  (Product: operands, reference and timing)

SHAPES = [[16384, 1536, 384], [16384, 384, 1536], [16384, 1152, 384], [16384, 384, 1152], [16384, 384, 384]]
SMALL_SHAPES = [[256, 64, 128], [200, 64, 136, 0, 1], [130, 70, 66, 1, 1]]
VARIANTS = [
    ["table", None],
    ["128x192 bk32", {"blocking": [128, 192, 32, 8, 8], "warp": [4, 8]}],
    ["128x128 unrolled", {"blocking": [128, 128, 16, 8, 8], "warp": [4, 8], "unroll": True}],
]


def probe(shapes: list, variants: list, torch) -> None:
    from dlc.runtime.device import get_context

    device = get_context().renderer
    rng = np.random.default_rng(0)
    for m, k, n, *t in shapes:
        ta, tb = (bool(t[0]), bool(t[1])) if t else (False, False)
        p = tune_matmul.Product((m, k, n, ta, tb), "", torch, rng)
        cublas = p.torch_ms
        print(f"{m}x{k}x{n} ta={ta:d} tb={tb:d}: cuBLAS " + (f"{cublas:.3f} ms" if cublas else "-"))
        for label, literal in variants:
            options = {"device": device}
            if literal is not None:
                options["matmul_variant"] = literal
            try:
                ms, err, head = p.time(options)
            except Exception as e:  # a variant this product cannot take: say why, go on
                print(f"   {label:18s} failed: {str(e).splitlines()[0][:160]}")
                continue
            ratio = f"x{ms / cublas:.2f}" if cublas else "-"
            tflops = p.flops() / ms / 1e9
            print(f"   {label:18s} {ms:.3f} ms  {tflops:.1f} TF/s  {ratio}  err {err:.1e}  {head.split(': ', 1)[-1]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", help="JSON list of [m, k, n] or [m, k, n, ta, tb]")
    ap.add_argument("--variants", help="JSON list of [label, matmul_variant literal or null]")
    ap.add_argument("--small", action="store_true", help="tiny products (llvmpipe too)")
    ap.add_argument("--reps", type=int, help="timed repetitions of each (20; --small 3)")
    args = ap.parse_args(argv)
    shapes = json.loads(args.shapes) if args.shapes else (SMALL_SHAPES if args.small else SHAPES)
    variants = json.loads(args.variants) if args.variants else VARIANTS
    tune_matmul.REPS = args.reps or (3 if args.small else 20)
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        torch = None
    probe(shapes, variants, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
