"""The products of one samples/char_gpt.dl training step (nanoGPT shakespeare_char: B=64,
T=256, 6 heads of 64, C=384, vocabulary 76), each as dlc compiles it inside the step, timed
against cuBLAS (torch.matmul on the same layouts, fp32, TF32 off) in one run.

    python benchmarks/bench_matmul_gpt.py [--reps 20] [--variants] [--small] [--json FILE]

Each product is written as the model writes it: `x @ transpose(w)` with PyTorch's [out, in]
weights, a weight gradient as the batch sum of X_b^T G_b transposed (autodiff's form), so the
row times everything dlc launches for it (a transpose kernel or a batch sum, where the
compiler leaves one). Rows: GPU ms (GL timer queries, median of --reps), TFLOP/s, the ratio to
cuBLAS, the relative error against a float64 product, and the kernel's header (template,
tiles, split-K). `--variants` also times each product under a few forced blockings (codegen
option `matmul_variant`). `--small` shrinks every size (llvmpipe: checks the script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gl  # noqa: E402

# name -> (.dl inputs {name: shape}, expression, torch expression over the same tensors)
# Sizes: B, T symbolic (bound at run time, as in the step); C=384, F=1536 (4C), Q=1152 (3C).
PRODUCTS = {
    "qkv = x W^T [BT,384]x[384,1152]": ({"x": "[B, T, 384]", "w": "[1152, 384]"}, "x @ transpose(w)", "x @ w.T"),
    "attn proj [BT,384]x[384,384]": ({"x": "[B, T, 384]", "w": "[384, 384]"}, "x @ transpose(w)", "x @ w.T"),
    "fc [BT,384]x[384,1536]": ({"x": "[B, T, 384]", "w": "[1536, 384]"}, "x @ transpose(w)", "x @ w.T"),
    "mlp proj [BT,1536]x[1536,384]": ({"x": "[B, T, 1536]", "w": "[384, 1536]"}, "x @ transpose(w)", "x @ w.T"),
    "logits [BT,384]x[384,76]": ({"x": "[B, T, 384]", "w": "[76, 384]"}, "x @ transpose(w)", "x @ w.T"),
    "dx fc [BT,1536]x[1536,384]": ({"g": "[B, T, 1536]", "w": "[1536, 384]"}, "g @ w", "g @ w"),
    "dx qkv [BT,1152]x[1152,384]": ({"g": "[B, T, 1152]", "w": "[1152, 384]"}, "g @ w", "g @ w"),
    "dW fc [1536,BT]x[BT,384]": (
        {"x": "[B, T, 384]", "g": "[B, T, 1536]"},
        "transpose(sum(transpose(x, [0, 2, 1]) @ g, axis=0))",
        "g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1])",
    ),
    "dW mlp proj [384,BT]x[BT,1536]": (
        {"x": "[B, T, 1536]", "g": "[B, T, 384]"},
        "transpose(sum(transpose(x, [0, 2, 1]) @ g, axis=0))",
        "g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1])",
    ),
    "dW qkv [1152,BT]x[BT,384]": (
        {"x": "[B, T, 384]", "g": "[B, T, 1152]"},
        "transpose(sum(transpose(x, [0, 2, 1]) @ g, axis=0))",
        "g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1])",
    ),
    "dW attn proj [384,BT]x[BT,384]": (
        {"x": "[B, T, 384]", "g": "[B, T, 384]"},
        "transpose(sum(transpose(x, [0, 2, 1]) @ g, axis=0))",
        "g.reshape(-1, g.shape[-1]).T @ x.reshape(-1, x.shape[-1])",
    ),
    "att = q k^T [BH,T,64]x[64,T]": (
        {"q": "[B, 6, T, 64]", "k": "[B, 6, T, 64]"},
        "q @ transpose(k, [0, 1, 3, 2])",
        "q @ k.transpose(-1, -2)",
    ),
    "P @ V [BH,T,T]x[T,64]": ({"p": "[B, 6, T, T]", "v": "[B, 6, T, 64]"}, "p @ v", "p @ v"),
    "dP = dY V^T [BH,T,64]x[64,T]": (
        {"p": "[B, 6, T, 64]", "v": "[B, 6, T, 64]"},
        "p @ transpose(v, [0, 1, 3, 2])",
        "p @ v.transpose(-1, -2)",
    ),
    "dV = P^T dY [BH,T,T]x[T,64]": (
        {"p": "[B, 6, T, T]", "v": "[B, 6, T, 64]"},
        "transpose(p, [0, 1, 3, 2]) @ v",
        "p.transpose(-1, -2) @ v",
    ),
}
SQUARE = ("4096^3", ({"a": "[4096, 4096]", "b": "[4096, 4096]"}, "a @ b", "a @ b"))
# forced alternatives (--variants): (tm, tn, bk, rm, rn[, ks]) and switches
VARIANTS = [
    {"blocking": (128, 256, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    {"blocking": (128, 192, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    {"blocking": (256, 128, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    {"blocking": (256, 64, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    {"blocking": (128, 64, 16, 8, 8), "double_buffer": True, "warp": (4, 8)},
    {"blocking": (64, 128, 32, 4, 8, 2), "store4": True, "double_buffer": True, "warp": (4, 8)},
]


def source(inputs: dict, expr: str, dims: dict) -> str:
    return "".join(f"input {n}: {s}\n" for n, s in inputs.items()) + f"y = {expr}\n"


def bound(shape: str, dims: dict) -> tuple[int, ...]:
    return tuple(int(dims.get(d.strip(), d.strip())) for d in shape.strip("[]").split(","))


def dlc_row(name, inputs, expr, dims, feeds, ref, reps, options=None) -> dict:
    import dlc
    from dlc.compiler.pipeline import compile_program
    from dlc.compiler.simplify import simplify
    from dlc.runtime.device import get_context
    from dlc.runtime.executor import Executor, LeafStore

    g = simplify(dlc.compile(source(inputs, expr, dims)).graph)
    opts = {"device": get_context().renderer, **(options or {})}
    prog = compile_program(g, [g.names["y"]], options=opts, ref_dims=dims)
    ex = Executor(prog.spec, prog.sources, LeafStore())
    try:
        ex.upload(feeds, dims)
        ms = bench_gl.gl_gpu_ms(ex.launch, reps)
        y = ex.run(feeds, dims, [prog.spec.roots[0]])[0]
    finally:
        ex.delete()
    err = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
    heads = [k.source.split("\n")[1].split(": ", 1)[-1] for k in prog.kernels]
    return {"ms": ms, "rel_err": err, "kernels": len(prog.kernels), "how": " | ".join(heads)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--variants", action="store_true", help="also time forced blockings")
    ap.add_argument("--small", action="store_true", help="tiny sizes (llvmpipe)")
    ap.add_argument("--only", help="products whose name contains this")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    torch, device = bench_gl.get_torch(set())
    dims = {"B": 2, "T": 16} if args.small else {"B": 64, "T": 256}
    products = dict(PRODUCTS)
    if not args.small:
        products[SQUARE[0]] = SQUARE[1]
    if args.only:
        products = {k: v for k, v in products.items() if args.only in k}
    rng = np.random.default_rng(0)
    rows = []
    print(f"dims {dims}; cuBLAS: {device}")
    print("| product | dlc ms | TFLOP/s | cuBLAS ms | x cuBLAS | rel err | kernels | dlc's kernel |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, (inputs, expr, texpr) in products.items():
        shapes = {n: bound(s, dims) for n, s in inputs.items()}
        feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
        if torch is not None and torch.cuda.is_available():
            tf = {n: torch.from_numpy(v).cuda() for n, v in feeds.items()}
            t_ms = bench_gl.torch_gpu_ms(torch, lambda e=texpr, t=tf: eval(e, {}, t), args.reps)
            ref = eval(texpr, {}, {n: v.double() for n, v in tf.items()}).cpu().numpy()
            del tf
        else:
            import torch as cpu_torch

            t_ms = None
            ref = eval(texpr, {}, {n: cpu_torch.from_numpy(v).double() for n, v in feeds.items()}).numpy()
        k = _k(name, shapes)
        flop = 2.0 * ref.size * k
        tries = [None] + (VARIANTS if args.variants else [])
        for opt in tries:
            try:
                r = dlc_row(name, inputs, expr, dims, feeds, ref, args.reps, {"matmul_variant": opt} if opt else None)
            except (ValueError, AssertionError) as exc:  # a forced blocking the template cannot take here
                print(f"|   forced {opt and opt['blocking']} | - | - | - | - | - | - | {exc} |")
                continue
            ratio = f"{r['ms'] / t_ms:.2f}" if t_ms else "-"
            label = name if opt is None else f"  forced {opt['blocking']}"
            t_txt = f"{t_ms:.3f}" if t_ms else "-"
            print(
                f"| {label} | {r['ms']:.3f} | {flop / r['ms'] / 1e9:.1f} | {t_txt} | {ratio} | {r['rel_err']:.1e} |"
                f" {r['kernels']} | {r['how']} |",
                flush=True,
            )
            rows.append({"product": name, "forced": opt and list(opt["blocking"]), "cublas_ms": t_ms, **r})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dims": dims, "device": device, "rows": rows}, f, indent=1)


def _k(name: str, shapes: dict) -> int:
    """The product's K: the contracted size (the rows for a weight gradient)."""
    if name.startswith("dW"):
        s = shapes["x"]
        return s[0] * s[1]
    first = next(iter(shapes.values()))
    return first[-2] if name.startswith("dV") else first[-1]


if __name__ == "__main__":
    main()
