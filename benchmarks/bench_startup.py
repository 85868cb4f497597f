"""Start-up and generation's per-token cost (issue 24 item 2, issue 22).

Rows:
  import dlc        a new process running `import dlc`: wall ms (median of --reps), and
                    which heavy packages it loaded (none is the contract)
  first step        a new process to its first MLP Adam step, cold (empty dlc and driver
                    caches) and warm (the second run), from bench_train_loop.first_step_rows
                    (its note splits the time into phases)
  first step, bytecode  the same two processes with Python's bytecode written and read
                    (PYTHONDONTWRITEBYTECODE unset, PYTHONPYCACHEPREFIX a fresh folder): what
                    a pip install has, where a machine that runs without bytecode compiles
                    NumPy's and dlc's sources in every process
  generate          `Session.generate` of a small char GPT (samples/char_gpt.dl with the sizes
                    of --gpt) from a fresh session and a one-token prompt, 2 x block tokens: the
                    context grows to the block, then slides. ms per token, wall and the calling
                    thread's CPU time (the host's own work, without the driver's threads)
  generate, host    the same with the launch loop's GL entry points no-ops (bench_launch's
                    stub): the Python per token, which llvmpipe's compute hides
  (--no-cache: the generate rows recompute the whole context each token, as before the KV
  cache; --tokens N: N tokens instead of 2 x block)

    python benchmarks/bench_startup.py [--rows import,first-step,bytecode,generate] [--gpt tiny|full]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

HEAVY = ("OpenGL", "lark", "onnx", "matplotlib", "torch", "PIL")
GPTS = {  # char_gpt.dl's constants: a size llvmpipe runs in seconds, and the real one
    "tiny": {"BLOCK": 64, "L": 2, "H": 2, "D": 8, "C": 16},
    "full": {},
}


def import_row(reps: int) -> dict:
    code = (
        "import sys, time; t = time.perf_counter(); import dlc; t = time.perf_counter() - t; "
        f"print(t, sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    walls, inside, heavy = [], [], []
    for _ in range(reps):
        t = time.perf_counter()
        # from elsewhere: in the checkout, its dlc/ folder would stand in for the installed dlc
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()
        )
        walls.append(time.perf_counter() - t)
        seconds, loaded = done.stdout.split(" ", 1)
        inside.append(float(seconds))
        heavy = loaded.strip()
    return {
        "row": "new process: import dlc",
        "ms": 1e3 * float(np.median(walls)),
        "note": f"import itself {1e3 * float(np.median(inside)):.1f} ms; heavy packages loaded: {heavy}",
    }


def first_step_rows(batch: int, rounds: int) -> list[dict]:
    from bench_gl import MLP
    from bench_train_loop import first_step_rows as rows

    return rows(MLP, batch, rounds)


def bytecode_rows(batch: int) -> list[dict]:
    """A cold and a warm first step (bench_train_loop's child and caches) with bytecode: the
    cold process writes every module's under a fresh PYTHONPYCACHEPREFIX, the warm one reads
    it back, as an installed package's is."""
    from bench_gl import MLP
    from bench_train_loop import FIRST_STEP, PHASES, _child_result, package_root

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "mlp.dl")
        with open(model, "w") as f:
            f.write(MLP)
        os.makedirs(os.path.join(tmp, "driver"))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            PYTHONPATH=os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH")) if p),
            PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"),
            DLC_CACHE_DIR=os.path.join(tmp, "cache"),
            DLC_PROGRAM_BINARY_CACHE="1",
            DLC_COMPILE_CACHE="1",
            __GL_SHADER_DISK_CACHE_PATH=os.path.join(tmp, "driver"),
            MESA_SHADER_CACHE_DIR=os.path.join(tmp, "driver"),
        )
        for label in ("cold (bytecode written)", "warm (bytecode read)"):
            t = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", FIRST_STEP, model, str(batch)], env=env, cwd=tmp, capture_output=True, text=True
            )
            wall = time.perf_counter() - t
            got = _child_result(done)
            if got is None:
                continue
            phases = ", ".join(f"{what} {1e3 * t:.0f}" for what, t in zip(PHASES, got["phases"]))
            rows.append(
                {
                    "row": "new process to first MLP Adam step, with bytecode",
                    "impl": f"dlc GL, {label}",
                    "ms": 1e3 * wall,
                    "note": f"{1e3 * got['seconds']:.0f} ms after the interpreter started: {phases}",
                }
            )
    return rows


def gpt_source(size: str) -> tuple[str, int]:
    text = open(os.path.join(ROOT, "samples/char_gpt.dl")).read()
    for name, value in GPTS[size].items():
        text = re.sub(rf"^const {name} = \d+", f"const {name} = {value}", text, flags=re.M)
    block = int(re.search(r"^const BLOCK = (\d+)", text, flags=re.M).group(1))
    return text, block


def generate_rows(size: str, reps: int, cache: bool = True, tokens: int | None = None) -> list[dict]:
    from bench_launch import _stubbed_entry_points

    import dlc

    text, block = gpt_source(size)
    model = dlc.compile(text)
    tokens = tokens or 2 * block
    rows = []
    for label, stub in (("", False), (", GL entry points stubbed (host only)", True)):
        walls, cpus = [], []
        with _stubbed_entry_points() if stub else contextlib.nullcontext():
            for _ in range(reps):
                sess = dlc.Session(model, backend="gl", seed=0)
                sess.generate([1], 1, block=block, cache=cache)  # compiles and links: not timed
                if tokens > block:  # and the prefill of a whole window
                    sess.generate([1] * block, 1, block=block, cache=cache)
                t, c = time.perf_counter(), time.thread_time()
                sess.generate([1], tokens, block=block, temperature=0.8, top_k=10, seed=1, cache=cache)
                walls.append((time.perf_counter() - t) / tokens)
                cpus.append((time.thread_time() - c) / tokens)
                sess.close()
        rows.append(
            {
                "row": f"generate, {size} char GPT (block {block}{'' if cache else ', no KV cache'}), per token{label}",
                "ms": 1e3 * float(np.median(walls)),
                "note": f"thread CPU {1e3 * float(np.median(cpus)):.3f} ms; {tokens} tokens from a 1-token prompt",
            }
        )
    return rows


ROWS = ("import", "first-step", "bytecode", "generate")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma list of {', '.join(ROWS)}")
    ap.add_argument("--reps", type=int, default=5, help="processes (import) or generations (generate): the median")
    ap.add_argument("--batch", type=int, default=64, help="the first step's MLP batch (64)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the cold/warm first-step processes (1)")
    ap.add_argument("--gpt", choices=sorted(GPTS), default="tiny", help="the char GPT's size for the generate rows")
    ap.add_argument("--no-cache", action="store_true", help="generate rows: recompute the context each token")
    ap.add_argument("--tokens", type=int, help="generate rows: tokens a generation (default: 2 x block)")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    args = ap.parse_args(argv)
    names = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in names if r not in ROWS]
    if unknown:
        ap.error(f"unknown rows {', '.join(unknown)}: choose from {', '.join(ROWS)}")
    for name in names:
        if name == "import":
            got = [import_row(args.reps)]
        elif name == "first-step":
            got = first_step_rows(args.batch, args.rounds)
        elif name == "bytecode":
            got = bytecode_rows(args.batch)
        else:
            got = generate_rows(args.gpt, args.reps, not args.no_cache, args.tokens)
        for row in got:
            cells = (row["row"], row.get("impl", "dlc GL"), f"{row['ms']:.4g}", row["note"])
            print(json.dumps(row) if args.json else f"| {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
