"""The embedding gradient (gather_grad) at the char GPT's sizes on the GPU: the kernel split
across work groups over chunks of positions (kernels_scatter.split_chunk) against the unsplit
one, and a sweep of forced chunks.

    python benchmarks/bench_gather.py [--reps 50] [--chunks 512,1024] [--small]

An embedding lookup's gradient alone ([65, 384] table, [64, 256] i32 indices = 16,384
positions; d cost / d gathered = g, an input): the program's gather_grad kernel is timed by GL
timer queries (bench_gl.gl_gpu_ms, launching that kernel alone), the program's kernels by
kind as bench_gpt.py --kernels does (bench_gl.per_kernel), for the codegen option
gather_chunk = 0 (no split), None (chosen by size) and forced chunks. Then one AdamW step (no
clipping, so that its update of the table merges into the gather_grad kernel; the GPT's
clipping keeps it a kernel of its own) with and without the split. Gradients are checked
against NumPy (np.add.at in float64; normwise relative error) and run twice for the same
bits; the step against the NumPy reference backend. `--small` is a quick run anywhere
(llvmpipe): it checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gl import TIMER_NOTES, gl_gpu_ms, per_kernel  # noqa: E402

import dlc  # noqa: E402

SWEEP = (None, 0, 256, 512, 1024, 2048, 4096)  # gather_chunk: None chosen by size, 0 no split


def model(vocab: int, channels: int, b: int, t: int) -> str:
    return (
        f"input idx: i32[{b}, {t}]\ninput g: [{b}, {t}, {channels}]\nparam wte: [{vocab}, {channels}]\n"
        "loss cost = sum(gather(wte, idx) * g)\n"
    )


def want(idx: np.ndarray, g: np.ndarray, vocab: int) -> np.ndarray:
    ids = np.clip(idx, 0, vocab - 1).ravel()
    out = np.zeros((vocab, g.shape[-1]))
    np.add.at(out, ids, g.reshape(-1, g.shape[-1]).astype(np.float64))
    return out


def gather_kernel(prog) -> tuple[int, str]:
    """The index and header line of the program's gather_grad kernel."""
    for i, k in enumerate(prog.kernels):
        head = k.source.split("\n")[1]
        if "gather_grad into" in head:
            return i, head.split(": ", 1)[-1]
    raise SystemExit("no gather_grad kernel in the program")


def by_kind(prog, ex, reps: int) -> str:
    heads = {k.name: k.source.split("\n")[1].split(": ", 1)[-1] for k in prog.kernels}
    kinds: dict[str, list[float]] = {}
    for row in per_kernel(ex, reps=reps):
        kinds.setdefault((heads.get(row["kernel"]) or "?").split()[0].rstrip(":"), []).append(row["ms"])
    ranked = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
    return ", ".join(f"{w} {len(v)} / {sum(v):.3f} ms" for w, v in ranked)


def probe(src: str, feeds: dict, vocab: int, chunk, reps: int, train: bool) -> None:
    s = dlc.Session(dlc.compile(src), backend="gl", target="compute", seed=0)
    if chunk is not None:
        s.backend.options["gather_chunk"] = chunk
    label = "chosen by size" if chunk is None else "no split (old)" if chunk == 0 else f"forced {chunk}"
    if train:  # one AdamW step on GL and on NumPy (the reference backend) from the same params
        ref = dlc.Session(dlc.compile(src), backend="numpy", seed=0)
        for sess in (s, ref):
            opt = dlc.AdamW(1e-3, beta2=0.99, weight_decay=0.1)  # no clipping: the update merges
            sess.train(feeds, optimizer=opt, batch_size=feeds["idx"].shape[0], steps=1)
        err = float(np.abs(s.params["wte"] - ref.params["wte"]).max())
        (_, prog, ex) = [v for v in s.backend._programs.values() if v[1].name == "train"][0]
        merged = "wte$m" in prog.kernels[gather_kernel(prog)[0]].source
        ok = err < 1e-5 and merged
        check = f"table after a step: max abs err {err:.1e}, update merged: {merged}" + ("" if ok else "  <-- WRONG")
    else:
        got = s.gradients(feeds)["wte"]
        again = s.gradients(feeds)["wte"]
        ref = want(feeds["idx"], feeds["g"], vocab)
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        same = np.array_equal(got, again)
        ok = err < 1e-5 and same
        check = f"normwise rel err {err:.1e}, same bits twice: {same}" + ("" if ok else "  <-- WRONG")
        (_, prog, ex) = list(s.backend._programs.values())[0]
    i, head = gather_kernel(prog)
    ms = gl_gpu_ms(lambda: ex.launch([i]), reps)
    print(f"  {label:16} gather_grad {ms:8.4f} ms   {check}")
    print(f"  {'':16} {head}")
    print(f"  {'':16} by kind: {by_kind(prog, ex, 5)}")
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--small", action="store_true", help="tiny sizes: checks the script (llvmpipe)")
    ap.add_argument("--chunks", help="forced chunks to sweep, comma-separated (default 256,512,1024,2048,4096)")
    args = ap.parse_args()
    vocab, channels, b, t = (65, 48, 4, 256) if args.small else (65, 384, 64, 256)
    sweep = (None, 0, 256) if args.small else SWEEP
    if args.chunks:
        sweep = (None, 0, *(int(c) for c in args.chunks.split(",")))
    rng = np.random.default_rng(0)
    feeds = {
        "idx": rng.integers(0, vocab, size=(b, t)),
        "g": rng.normal(size=(b, t, channels)).astype(np.float32),
    }
    from dlc.runtime.device import get_context

    print(f"device: {get_context().renderer}")
    print(f"gather_grad of a [{vocab}, {channels}] table over [{b}, {t}] positions ({b * t}),", end=" ")
    print(f"GPU ms, median of {args.reps}")
    for chunk in sweep:
        probe(model(vocab, channels, b, t), feeds, vocab, chunk, args.reps, train=False)
    print("with AdamW's update merged (a training step's gather_grad; with clipping, as the GPT, it is not):")
    train_feeds = {"idx": feeds["idx"], "g": feeds["g"]}
    for chunk in (None, 0):
        probe(model(vocab, channels, b, t), train_feeds, vocab, chunk, args.reps, train=True)
    for note in sorted(TIMER_NOTES):
        print("note:", note)


if __name__ == "__main__":
    main()
