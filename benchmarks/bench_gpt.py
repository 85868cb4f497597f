"""nanoGPT's shakespeare_char run in dlc and in PyTorch, in one process on one GPU (issue "A GPT
end to end"): samples/char_gpt.dl trained by Session.train on GL against the same model in
PyTorch (benchmarks/torch_gpt.py; fp32, TF32 off; eager with scaled_dot_product_attention,
and with the attention written out), with the same recipe: AdamW (lr 1e-3, betas 0.9/0.99,
weight decay 0.1 on matrices), 100 warmup steps and cosine decay to 1e-4, clipping at 1.0,
batch 64 x 256 characters of samples/data/shakespeare.txt.

    python benchmarks/bench_gpt.py [--steps 30] [--train-steps 0] [--small]

Rows: ms a training step (median of `--steps` after warm-up), tokens a second, peak GPU
memory, and with `--train-steps N` the validation loss of each after N steps of the same
batches (nanoGPT's 5000 for the full run). `--small` is a tiny configuration for a CPU-only
machine (llvmpipe): it checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

FULL = {"BLOCK": 256, "L": 6, "H": 6, "D": 64, "C": 384, "P": 0.2, "B": 64}
SMALL = {"BLOCK": 32, "L": 2, "H": 2, "D": 16, "C": 32, "P": 0.2, "B": 8}
LR, MIN_LR, WARMUP, DECAY_STEPS = 1e-3, 1e-4, 100, 5000
VAL_BATCHES = 20


def model_source(cfg: dict) -> str:
    text = (ROOT / "samples" / "char_gpt.dl").read_text()
    for name in ("BLOCK", "L", "H", "D", "C", "P"):
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {cfg[name]}", text, flags=re.M)
        if n != 1 and name != "P":
            raise SystemExit(f"samples/char_gpt.dl has no 'const {name} = ...' line")
    return text


def kernel_table(sess, opt, data, b: int) -> list[dict]:
    """GPU ms of each kernel of one training step (bench_gl's timer-query hook)."""
    from bench_gl import per_kernel

    graph = sess._train_graph(None, opt)
    loss = graph.names[graph.losses[0]]
    feeds = {**data.steps(0, 1, b, 0), "$lr": np.asarray(opt.lr, np.float32)}
    dims = {"B": b, "T": data.block}
    sess.backend.step(graph, [loss], feeds, dims)
    prog, ex = sess.backend.program(graph, [loss], True, dims)
    # what each kernel is (a matmul's header names its shapes, tiles and split-K)
    heads = {k.name: k.source.split("\n")[1].split(": ", 1)[-1] for k in prog.kernels}
    return [{**row, "what": heads.get(row["kernel"], "")} for row in per_kernel(ex, reps=3)]


OPTIONS: dict = {}  # --options: codegen options of dlc's programs (compiler/codegen/options.py)


def gl_backend():
    from dlc.backends.gl import GLBackend

    return GLBackend(OPTIONS)


def dlc_run(cfg, data, steps: int, train_steps: int, kernels: bool = False, sample: int = 0) -> dict:
    import dlc
    from dlc import schedules

    sess = dlc.Session(dlc.compile(model_source(cfg)), backend=gl_backend(), seed=0)
    opt = dlc.AdamW(
        LR,
        beta2=0.99,
        weight_decay=0.1,
        clip_norm=1.0,
        schedule=schedules.Cosine(warmup=WARMUP, decay_steps=DECAY_STEPS, min_lr=MIN_LR),
    )
    b = cfg["B"]
    t0 = time.perf_counter()
    sess.train(data, optimizer=opt, batch_size=b, steps=2)  # compiles and links every program
    first = time.perf_counter() - t0
    times = []
    for _ in range(3):  # a few windows of steps: the median of their per-step times
        t = time.perf_counter()
        sess.train(data, optimizer=opt, batch_size=b, steps=steps)
        times.append((time.perf_counter() - t) / steps)
    row = {"first_s": first, "step_ms": 1e3 * float(np.median(times))}
    row["memory_mib"] = sum(v[1] for v in sess.memory().values()) / 2**20
    if kernels:
        row["kernels"] = kernel_table(sess, opt, data, b)
    if train_steps:
        sess = dlc.Session(dlc.compile(model_source(cfg)), backend=gl_backend(), seed=0)
        t = time.perf_counter()
        sess.train(data, optimizer=opt, batch_size=b, steps=train_steps)
        row["train_s"] = time.perf_counter() - t
        val = data.val.steps(0, VAL_BATCHES, b, 0)
        batches = [{k: v[i * b : (i + 1) * b] for k, v in val.items()} for i in range(VAL_BATCHES)]
        row["val_loss"] = float(np.mean([sess.eval("loss", feeds) for feeds in batches]))
        if sample:
            t = time.perf_counter()
            row["sample"] = sess.generate("ROMEO:", sample, vocab=data.vocab, temperature=0.8, top_k=40, seed=0)
            row["generate_tok_s"] = sample / (time.perf_counter() - t)
    return row


def torch_run(cfg, data, steps: int, train_steps: int, sdpa: bool) -> dict:
    import torch
    from torch_gpt import GPT

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    b = cfg["B"]

    def make():
        torch.manual_seed(0)
        model = GPT(76, cfg["BLOCK"], cfg["L"], cfg["H"], cfg["C"], cfg["P"], sdpa=sdpa).to(dev)
        kw = {"fused": True} if dev == "cuda" else {}
        opt = torch.optim.AdamW(model.decay_groups(0.1), lr=LR, betas=(0.9, 0.99), **kw)

        def lr_at(it):
            from dlc.runtime.schedules import Cosine

            return Cosine(warmup=WARMUP, decay_steps=DECAY_STEPS, min_lr=MIN_LR).lr(LR, it) / LR

        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_at)

    def batch(s):
        x = data.steps(s, 1, b, 0)
        return (
            torch.from_numpy(x["tokens"].astype(np.int64)).to(dev),
            torch.from_numpy(x["targets"].astype(np.int64)).to(dev),
        )

    def step(model, opt, sched, s):
        x, y = batch(s)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    model, opt, sched = make()
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for s in range(3):
        step(model, opt, sched, s)
    sync()
    times = []
    for w in range(3):
        t = time.perf_counter()
        for s in range(steps):
            step(model, opt, sched, 3 + w * steps + s)
        sync()
        times.append((time.perf_counter() - t) / steps)
    row = {"step_ms": 1e3 * float(np.median(times))}
    if dev == "cuda":
        row["memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
    if train_steps:
        model, opt, sched = make()
        t = time.perf_counter()
        for s in range(train_steps):
            step(model, opt, sched, s)
        sync()
        row["train_s"] = time.perf_counter() - t
        model.eval()
        val = data.val.steps(0, VAL_BATCHES, b, 0)
        with torch.no_grad():
            losses = []
            for i in range(VAL_BATCHES):
                x = torch.from_numpy(val["tokens"][i * b : (i + 1) * b].astype(np.int64)).to(dev)
                y = torch.from_numpy(val["targets"][i * b : (i + 1) * b].astype(np.int64)).to(dev)
                losses.append(model(x, y)[1].item())
        row["val_loss"] = float(np.mean(losses))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="steps a timed window (3 windows)")
    ap.add_argument("--train-steps", type=int, default=0, help="also train this many steps and compare val losses")
    ap.add_argument("--small", action="store_true", help="a tiny configuration (llvmpipe)")
    ap.add_argument("--only", choices=("dlc", "torch"), help="run one side only")
    ap.add_argument("--kernels", action="store_true", help="also print dlc's step kernel by kernel (GPU ms)")
    ap.add_argument("--kernels-out", metavar="JSON", help="with --kernels, write dlc's whole kernel table there")
    ap.add_argument("--options", default="{}", help="codegen options for dlc's programs, as JSON")
    ap.add_argument("--sample", type=int, default=0, help="after --train-steps, generate this many characters")
    args = ap.parse_args()
    OPTIONS.update(json.loads(args.options))
    from dlc.text import TextData

    cfg = dict(SMALL if args.small else FULL)
    if "dropout(" not in (ROOT / "samples" / "char_gpt.dl").read_text():
        cfg["P"] = 0.0  # the .dl model has no dropout: PyTorch trains without it too
    data = TextData(ROOT / "samples" / "data" / "shakespeare.txt", block=cfg["BLOCK"])
    tokens = cfg["B"] * cfg["BLOCK"]
    print(f"config {cfg}; {time.strftime('%F %T')}")
    rows = []
    if args.only != "torch":
        rows.append(("dlc GL", dlc_run(cfg, data, args.steps, args.train_steps, args.kernels, args.sample)))
    if args.only != "dlc":
        rows.append(("PyTorch eager, SDPA", torch_run(cfg, data, args.steps, args.train_steps, sdpa=True)))
        rows.append(
            ("PyTorch eager, attention written out", torch_run(cfg, data, args.steps, args.train_steps, sdpa=False))
        )
    base = next((r["step_ms"] for name, r in rows if name == "PyTorch eager, SDPA"), None)
    print("| run | ms / step | x PyTorch SDPA | tokens / s | peak GPU MiB | val loss | train s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in rows:
        ratio = f"{r['step_ms'] / base:.2f}" if base else "-"
        mem = f"{r['memory_mib']:.0f}" if "memory_mib" in r else "-"
        val = f"{r['val_loss']:.4f}" if "val_loss" in r else "-"
        train = f"{r['train_s']:.0f}" if "train_s" in r else "-"
        print(
            f"| {name} | {r['step_ms']:.2f} | {ratio} | {tokens / r['step_ms'] * 1e3:,.0f} | {mem} | {val} | {train} |"
        )
    for name, r in rows:
        if "first_s" in r:
            print(f"{name}: first two steps (compile and link) {r['first_s']:.1f} s")
        if "sample" in r:
            print(f"{name}: generated {r['generate_tok_s']:.0f} characters a second:\nROMEO:{r['sample']}")
        if r.get("kernels"):
            table = r["kernels"]
            total = sum(k["ms"] for k in table)
            if args.kernels_out:
                with open(args.kernels_out, "w") as f:
                    json.dump(table, f, indent=1)
            print(f"\n{name}: {len(table)} kernels, {total:.2f} ms of GPU time a step; the 30 longest:")
            print("| kernel | ms | share | what |\n| --- | --- | --- | --- |")
            for k in sorted(table, key=lambda k: -k["ms"])[:30]:
                print(f"| {k['kernel']} | {k['ms']:.3f} | {k['ms'] / total:.1%} | {k.get('what', '')[:160]} |")
            matmuls = [k for k in table if "_matmul" in k["kernel"]]
            print(f"products: {len(matmuls)} kernels, {sum(k['ms'] for k in matmuls):.2f} ms a step")
            kinds: dict[str, list[float]] = {}  # by the first word of each kernel's description
            for k in table:
                kinds.setdefault((k.get("what") or "?").split()[0].rstrip(":"), []).append(k["ms"])
            ranked = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
            print("by kind: " + ", ".join(f"{w} {len(v)} / {sum(v):.2f} ms" for w, v in ranked))


if __name__ == "__main__":
    main()
