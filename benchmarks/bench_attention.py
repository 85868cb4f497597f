"""Fused attention forward + backward on GL against PyTorch's scaled_dot_product_attention, in
one process: prints a table (not a test).

    python benchmarks/bench_attention.py            # nanoGPT shakespeare_char: q, k, v [64, 6, 256, 64]
    python benchmarks/bench_attention.py --small    # a quick run anywhere (Mesa llvmpipe too)
    python benchmarks/bench_attention.py --dropout 0.2   # also with dropout on the probabilities

Rows, each the work of y = attention(q, k, v, causal=true) and its gradients dq, dk, dv for an
upstream gradient r (torch: y.backward(r)), fp32 (PyTorch with TF32 off):
- dlc GL fused: the `attention` op's kernels (the forward with its row logsumexp, the row
  deltas, dq, dk and dv);
- dlc GL forward only (the attention kernel alone);
- with --dropout P: dlc GL fused with dropout P on the probabilities (a training step's
  kernels, the mask recomputed from the hash in each) and PyTorch SDPA with dropout_p=P;
- dlc GL unfused: the written-out form (q @ k^T, mask, softmax, @ v) with the compiler's
  attention rewrite switched off, its gradient through matmuls and reductions;
- PyTorch SDPA (the backend it picks for fp32 on the device at hand) and PyTorch's written-out
  form (eager math).
GPU times of dlc come from GL timer queries (wall-clock with glFinish on llvmpipe), PyTorch's
from CUDA events; each is the median of --reps runs. The gradients of the fused program are
checked against PyTorch's first (the max abs difference is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gl  # noqa: E402  (the timing helpers)

FUSED = """
input q: [{B}, {H}, {T}, {D}]
input k: [{B}, {H}, {T}, {D}]
input v: [{B}, {H}, {T}, {D}]
input r: [{B}, {H}, {T}, {D}]
y = attention(q, k, v, causal=true)
loss l = sum(y * r)
"""

WRITTEN_OUT = """
input q: [{B}, {H}, {T}, {D}]
input k: [{B}, {H}, {T}, {D}]
input v: [{B}, {H}, {T}, {D}]
input r: [{B}, {H}, {T}, {D}]
y = softmax(where(tril(ones([{T}, {T}])), q @ transpose(k, [0, 1, 3, 2]) / sqrt({D}), -inf)) @ v
loss l = sum(y * r)
"""
DROPPED = WRITTEN_OUT.replace("y = softmax(", "y = dropout(softmax(").replace("-inf)) @ v", "-inf)), {P}) @ v")


@contextlib.contextmanager
def rewrite_off():
    """Build models without the written-out attention -> `attention` rewrite."""
    from dlc.compiler import lang

    saved = lang.fuse_attention
    lang.fuse_attention = lambda g: g
    try:
        yield
    finally:
        lang.fuse_attention = saved


def gl_program(source: str, grads: bool, training: bool = False):
    """The compiled program fetching dq, dk, dv (grads) or y, and its executor; `training`:
    of the model's training form (dropout drops), its random counters set."""
    import dlc
    from dlc.compiler.autodiff import differentiate, grad_name
    from dlc.compiler.modes import training_form
    from dlc.compiler.pipeline import compile_program
    from dlc.compiler.simplify import simplify
    from dlc.runtime.device import get_context
    from dlc.runtime.executor import Executor, LeafStore

    g = dlc.compile(source).graph
    store = LeafStore()
    if training:
        g = training_form(g)
        store.set("$seed", np.array(1234.0, np.float32))
        store.set("$step", np.array(7.0, np.float32))
    if grads:
        g = simplify(differentiate(g, "l", ["q", "k", "v"])[0])
        roots = [g.names[grad_name(n)] for n in ("q", "k", "v")]
    else:
        roots = [g.names["y"]]
    prog = compile_program(g, roots, options={"device": get_context().renderer})
    return prog, Executor(prog.spec, prog.sources, store), roots


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="small sizes for a quick run")
    p.add_argument("--shape", help="B,H,T,D (default 64,6,256,64; --small 2,2,64,16)")
    p.add_argument("--reps", type=int, help="timed repetitions (20; --small 3)")
    p.add_argument("--skip", default="", help="comma list of: unfused, torch")
    p.add_argument("--dropout", type=float, help="also time dropout P on the probabilities (fused)")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    shape = args.shape or ("2,2,64,16" if args.small else "64,6,256,64")
    b, h, t, d = (int(x) for x in shape.split(","))
    reps = args.reps or (3 if args.small else 20)
    if args.small:
        bench_gl.WARM_S = 0.02
    sizes = {"B": b, "H": h, "T": t, "D": d}
    rng = np.random.default_rng(0)
    feeds = {n: rng.normal(size=(b, h, t, d)).astype(np.float32) for n in "qkvr"}

    from dlc.runtime.device import get_context

    ctx = get_context()
    print(f"attention forward + backward, q, k, v [{b}, {h}, {t}, {d}] causal, fp32; GL: {ctx.renderer}")
    rows = []

    fused, ex, roots = gl_program(FUSED.format(**sizes), grads=True)
    ex.upload(feeds, {})
    got = ex.run(feeds, {}, roots)
    kernels = len(fused.spec.kernels)
    rows.append(("dlc GL fused (forward + backward)", bench_gl.gl_gpu_ms(ex.launch, reps), f"{kernels} kernels"))
    _, fex, _ = gl_program(FUSED.format(**sizes), grads=False)
    fex.upload(feeds, {})
    rows.append(("dlc GL fused, forward only", bench_gl.gl_gpu_ms(fex.launch, reps), "1 kernel"))
    if args.dropout is not None:
        _, dex, _ = gl_program(DROPPED.format(**sizes, P=args.dropout), grads=True, training=True)
        dex.upload(feeds, {})
        rows.append((f"dlc GL fused, dropout {args.dropout:g}", bench_gl.gl_gpu_ms(dex.launch, reps), ""))
    if "unfused" not in skip:
        with rewrite_off():
            unfused, uex, _ = gl_program(WRITTEN_OUT.format(**sizes), grads=True)
        uex.upload(feeds, {})
        ms = bench_gl.gl_gpu_ms(uex.launch, reps)
        rows.append(("dlc GL unfused (written out)", ms, f"{len(unfused.spec.kernels)} kernels"))

    torch, device = bench_gl.get_torch(skip)
    if torch is not None:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        tq = {n: torch.tensor(feeds[n], device=dev, requires_grad=n != "r") for n in "qkvr"}
        sdpa = torch.nn.functional.scaled_dot_product_attention
        mask = torch.ones(t, t, dtype=torch.bool, device=dev).tril()

        def step(fn):
            def run():
                for n in "qkv":
                    tq[n].grad = None
                fn().backward(tq["r"])

            return run

        fused_t = step(lambda: sdpa(tq["q"], tq["k"], tq["v"], is_causal=True))
        math_t = step(
            lambda: (
                torch.softmax((tq["q"] @ tq["k"].transpose(-1, -2) / d**0.5).masked_fill(~mask, -float("inf")), -1)
                @ tq["v"]
            )
        )
        fused_t()
        err = max(float(np.abs(np.asarray(a) - tq[n].grad.cpu().numpy()).max()) for n, a in zip("qkv", got))
        print(f"max |dlc - torch| over dq, dk, dv: {err:.3g}")
        rows.append((f"PyTorch SDPA ({dev}: {device})", bench_gl.torch_gpu_ms(torch, fused_t, reps), ""))
        if args.dropout is not None:
            p = args.dropout
            dropped_t = step(lambda: sdpa(tq["q"], tq["k"], tq["v"], dropout_p=p, is_causal=True))
            rows.append((f"PyTorch SDPA, dropout {p:g}", bench_gl.torch_gpu_ms(torch, dropped_t, reps), ""))
        rows.append((f"PyTorch written out ({dev})", bench_gl.torch_gpu_ms(torch, math_t, reps), ""))

    kernel_rows = bench_gl.per_kernel(ex)  # where the fused step's time goes (GPU timer queries)
    width = max(len(r[0]) for r in rows)
    for name, ms, note in rows:
        print(f"{name:<{width}}  {ms:10.3f} ms  {note}")
    sdpa_ms = next((ms for name, ms, _ in rows if name.startswith("PyTorch SDPA")), None)
    if sdpa_ms:
        print(f"fused / SDPA: {rows[0][1] / sdpa_ms:.2f}x (the target: <= 1.5x)")
    print("the fused step's kernels (ms each; 0 where the driver's timer reads nothing):")
    for r in kernel_rows:
        print(f"  {r['kernel']:<40} {r['ms']:8.3f}")
    for note in sorted(bench_gl.TIMER_NOTES):
        print("note:", note)


if __name__ == "__main__":
    main()
