"""Tune the blocked GLSL matmul on this GPU: every candidate blocking and switch combination of
each size class, timed on the products the class holds, beside torch.matmul (CUDA, TF32 off);
prints a table and the row of the tuning table (compiler/codegen/matmul_tuning.py) the
measurements choose, as a Python literal to paste (not a test).

    python benchmarks/tune_matmul.py                  # the full run for a GPU (~4 min on an H100)
    python benchmarks/tune_matmul.py --small          # tiny sizes: checks the script anywhere
    python benchmarks/tune_matmul.py --classes split --budget 120 --out DIR

Products (m, k, n, ta, tb): 4096^3 (A B and A B^T) for "big"; the MLP 784-1024-1024-10 step
at batch 1024 for the others: 1024x784x1024, 1024x1024x1024 and their gradient products
(A B^T, A^T B) for "split", the 10-wide output and its gradient for "thin" (dh2 = dlogits @
W3^T, K = 10, takes the tile16 template: timed for the record, nothing to tune). Each product
runs in the class the codegen would give it on this device; a class's row may take any
blocking, so "split" candidates include 128x128 tiles too.

Each candidate is compiled through the real codegen (codegen option `matmul_variant`), checked
against a float64 product (a wrong result is reported and never chosen), and timed by GL timer
queries (median of --reps after --warm seconds of the same work; glFinish wall-clock where the
driver's timer reads 0, as llvmpipe's). A class's choice is the variant with the least total
time over the class's products. `--budget` seconds bounds the candidates tried (those left are
listed as skipped), so one call stays within a GPU lease. --out DIR writes tune_matmul.json
and tune_matmul.txt (the table and the literal).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pprint
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gl  # noqa: E402

# (m, k, n, ta, tb) -> what it is
BIG_SHAPES = {
    (4096, 4096, 4096, False, False): "4096^3 A B",
    (4096, 4096, 4096, False, True): "4096^3 A B^T",
}
MLP_SHAPES = bench_gl.MLP_SHAPES  # the MLP step's products
GPT_SHAPES = {  # samples/char_gpt.dl's step: weight gradients ("splitk" where the family has it), a
    # projection from 384 channels ("shortk" where the family has it)
    (16384, 384, 1536, False, True): "GPT fc = X W^T over K = 384",
    (1536, 16384, 384, True, False): "GPT dW fc = X^T G over K = B*T",
    (1152, 16384, 384, True, False): "GPT dW qkv = X^T G over K = B*T",
    (16384, 1536, 384, False, False): 'GPT MLP projection over N = 384 ("fitted" where the family has it)',
}
SMALL_SHAPES = {  # --small: one product of each class at llvmpipe-friendly sizes
    (256, 96, 264, False, True): "big (small)",
    (136, 72, 132, True, False): "split (small)",
    (72, 68, 100, False, False): "medium (small)",
    (300, 260, 10, False, False): "thin (small)",
    (40, 10, 36, False, True): "tile16 (small)",
}

# Candidate blockings per class: (tm, tn, bk, rm, rn[, ks[, swizzle]])
BLOCKINGS = {
    "big": [
        (128, 128, 16, 8, 8),
        (128, 128, 8, 8, 8),
        (128, 128, 32, 8, 8),
        (256, 128, 16, 8, 8),
        (128, 256, 16, 8, 8),
    ],
    "split": [
        (128, 64, 32, 8, 4, 2),
        (64, 128, 32, 4, 8, 2),
        (128, 64, 16, 8, 4, 2),
        (128, 64, 32, 8, 4),
        (64, 64, 32, 4, 4),
        (64, 64, 64, 4, 4, 4),
        (128, 128, 16, 8, 8),
    ],
    "splitk": [(128, 128, 16, 8, 8), (128, 128, 8, 8, 8), (64, 128, 32, 4, 8, 2), (128, 64, 32, 8, 4, 2)],
    "shortk": [(128, 256, 16, 8, 8), (128, 128, 16, 8, 8), (128, 128, 8, 8, 8), (256, 128, 16, 8, 8)],
    "fitted": [(128, 192, 32, 8, 8), (128, 192, 16, 8, 8), (128, 128, 32, 8, 8)],
    "narrow": [(128, 64, 16, 8, 8), (256, 64, 16, 8, 8), (128, 64, 32, 8, 4, 2), (64, 64, 32, 4, 4)],
    "medium": [(64, 64, 32, 4, 4), (64, 64, 16, 4, 4), (64, 64, 32, 4, 4, 2), (64, 32, 32, 4, 4, 2)],
    "thin": [(16, 16, 64, 4, 4, 16), (32, 16, 64, 4, 4, 8), (16, 16, 32, 4, 4, 8), (64, 16, 64, 4, 4, 4)],
}
# Switch combinations: the first two on every blocking, the rest on the two best blockings;
# vec4 stores are then tried on the best of all (tune()).
SWITCHES = [
    {},
    {"double_buffer": True},
    {"warp": (4, 8)},
    {"warp": (8, 4)},
    {"double_buffer": True, "warp": (4, 8)},
    {"double_buffer": True, "warp": (8, 4)},
    {"warp": (4, 8), "unroll": True},
    {"double_buffer": True, "warp": (4, 8), "unroll": True},
]


def describe(literal: dict) -> str:
    from dlc.compiler.codegen import matmul_tuning as tuning

    v = tuning.variant(literal)
    b = v.blocking
    extra = (f" ks {b.ks}" if b.ks > 1 else "") + ("" if b.swizzle else " unswizzled")
    return f"{b.tm}x{b.tn} bk {b.bk} {b.rm}x{b.rn}{extra}; {v.describe()}"


class Product:
    """One product's operands on the host and its float64 reference."""

    def __init__(self, shape, what: str, torch, rng):
        self.m, self.k, self.n, self.ta, self.tb = shape
        self.what = what
        m, k, n = self.m, self.k, self.n
        self.a = rng.normal(size=(k, m) if self.ta else (m, k)).astype(np.float32)
        self.b = rng.normal(size=(n, k) if self.tb else (k, n)).astype(np.float32)
        A, B = (self.a.T if self.ta else self.a), (self.b.T if self.tb else self.b)
        self.torch_ms = None
        if torch is not None and torch.cuda.is_available():
            ta_, tb_ = (
                torch.from_numpy(np.ascontiguousarray(A)).cuda(),
                torch.from_numpy(np.ascontiguousarray(B)).cuda(),
            )
            self.want = (ta_.double() @ tb_.double()).cpu().numpy()
            self.torch_ms = bench_gl.torch_gpu_ms(torch, lambda: torch.matmul(ta_, tb_), REPS)
        else:
            self.want = A.astype(np.float64) @ B.astype(np.float64)
        self.scale = float(np.max(np.abs(self.want)))

    @property
    def label(self) -> str:
        return f"{self.m}x{self.k}x{self.n} ta={self.ta:d} tb={self.tb:d}"

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def size_class(self, device: str) -> str:
        """The class the codegen gives this product on `device` ("tile16": not blocked)."""
        from dlc.compiler.codegen import kernels_matmul

        head = self.compile({"device": device}).kernels[0].source.split("\n")[1]
        # "(family, class)" or "(family, class, tile fitted to MxN)"
        found = [c for c in kernels_matmul.tuning.CLASSES if f", {c})" in head or f", {c}, tile fitted" in head]
        return found[0] if found else "tile16"

    def compile(self, options: dict):
        from dlc.compiler.builder import GraphBuilder
        from dlc.compiler.pipeline import compile_program

        g = GraphBuilder()
        ia, ib = g.input("a", self.a.shape), g.input("b", self.b.shape)
        self.y = g.add("matmul", [ia, ib], ta=self.ta, tb=self.tb)
        return compile_program(g.build(), [self.y], options=options)

    def time(self, options: dict) -> tuple[float, float, str]:
        """(GPU ms, error relative to the largest output, kernel header)."""
        from dlc.runtime.executor import Executor, LeafStore

        prog = self.compile(options)
        ex = Executor(prog.spec, prog.sources, LeafStore())
        try:
            ex.upload({"a": self.a, "b": self.b}, {})
            ms = bench_gl.gl_gpu_ms(ex.launch, REPS)
            out = ex.run({"a": self.a, "b": self.b}, {}, [self.y])[0]
        finally:
            ex.delete()
        err = float(np.max(np.abs(out - self.want))) / max(self.scale, 1e-30)
        return ms, err, prog.kernels[0].source.split("\n")[1]


REPS = 20
TOLERANCE = 1e-4  # relative to the largest output: fp32 sums of a few thousand terms


class Search:
    """One class's candidates: each literal timed once on every product of the class."""

    def __init__(self, rows: list[dict], prods: list[Product], cls: str, device: str, end: float):
        self.rows, self.prods, self.cls, self.device, self.end = rows, prods, cls, device, end
        self.totals: dict[tuple, float] = {}  # by the variant's literal as a sorted tuple
        self.literals: dict[tuple, dict] = {}
        self.skipped = 0

    @staticmethod
    def key(lit: dict) -> tuple:
        from dlc.compiler.codegen import matmul_tuning as tuning

        return tuple(sorted(tuning.variant(lit).literal().items()))

    def attempt(self, lit: dict, prefix: str = "") -> None:
        key = self.key(lit)
        if key in self.literals:
            return
        if time.perf_counter() > self.end:
            self.skipped += 1
            return
        self.literals[key] = lit
        total = _try(self.rows, self.prods, self.cls, self.device, lit, prefix)
        if total is not None:
            self.totals[key] = total

    def leaders(self, count: int) -> list[dict]:
        return [self.literals[k] for k in sorted(self.totals, key=self.totals.get)[:count]]


def tune(products: dict[str, list[Product]], device: str, budget: float) -> tuple[list[dict], dict]:
    """Rows of the table and each class's best literal. Per class, in three rounds: every
    blocking single- and double-buffered (and the table's variant now); the other switch
    combinations on the best two blockings; vec4 stores on the best of all."""
    from dlc.compiler.codegen import matmul_tuning as tuning

    rows: list[dict] = []
    best: dict[str, dict] = {}
    end = time.perf_counter() + budget
    skipped = 0
    for i, (cls, prods) in enumerate(products.items()):
        for p in prods:
            if p.torch_ms is not None:
                rows.append(_row(p, cls, "torch.matmul (cuBLAS fp32, TF32 off)", p.torch_ms, None))
        if cls == "tile16":
            for p in prods:
                ms, err, _ = p.time({"device": device})
                rows.append(_row(p, cls, "tile16 (the template for K this short)", ms, err))
            continue
        # this class's share of the time left (what one leaves goes to the next)
        search = Search(
            rows, prods, cls, device, time.perf_counter() + (end - time.perf_counter()) / (len(products) - i)
        )
        held = tuning.lookup(device, cls)  # None: an optional class this family has not measured
        current = held.literal() if held is not None else None
        if current is not None:
            search.attempt(current, "table now: ")
        for blk, first in itertools.product(BLOCKINGS[cls], SWITCHES[:2]):
            search.attempt({"blocking": blk, **first})
        for blk in dict.fromkeys(tuple(lit["blocking"]) for lit in search.leaders(2)):
            for switches in SWITCHES[2:]:
                search.attempt({"blocking": blk, **switches})
        for top in search.leaders(1):
            search.attempt({**top, "store4": True})
        skipped += search.skipped
        if not search.totals:
            continue
        (win,) = search.leaders(1)
        best[cls] = tuning.variant(win).literal()
        total = search.totals[search.key(win)]
        now = search.totals.get(search.key(current)) if current is not None else None
        rows.append(
            {
                "class": cls,
                "product": f"best of {len(search.totals)} (ms: its total over the class)",
                "variant": describe(win),
                "ms": total,
                "vs table now": f"{now / total:.2f}x" if now else "",
            }
        )
    if skipped:
        rows.append({"class": "", "product": f"{skipped} candidates skipped: past --budget"})
    return rows, best


def _try(rows, prods, cls, device, lit, prefix) -> float | None:
    """Time one literal on every product of the class; its total ms, or None where it is no
    candidate: a switch falls back on this device (it would be another candidate, mislabelled),
    the driver refuses it, or a result is wrong."""
    total = 0.0
    options = {"device": device, "matmul_variant": lit}
    for p in prods:
        head = p.compile(options).kernels[0].source.split("\n")[1]
        fell_back = [part.strip() for part in head.split(";")[2:]]  # notes after the switches
        if fell_back and not prefix:
            rows.append(
                {"class": cls, "product": "(all)", "variant": describe(lit), "note": "; ".join(fell_back)[:100]}
            )
            return None
        try:
            ms, err, _ = p.time(options)
        except Exception as exc:  # a variant the driver refuses: say so, go on
            rows.append({"class": cls, "product": p.what, "variant": prefix + describe(lit), "note": str(exc)[:100]})
            return None
        note = "; ".join(fell_back)[:100]
        if not err <= TOLERANCE:
            note = f"WRONG (error {err:.2g}) " + note
        rows.append(_row(p, cls, prefix + describe(lit), ms, err, note))
        if not err <= TOLERANCE:
            return None
        total += ms
    return total


def _row(p: Product, cls: str, variant: str, ms: float, err, note: str = "") -> dict:
    row = {
        "class": cls,
        "product": f"{p.what} {p.label}",
        "variant": variant,
        "ms": ms,
        "TFLOP/s": p.flops() / ms / 1e9,
    }
    if p.torch_ms:
        row["of cuBLAS"] = f"{100 * p.torch_ms / ms:.0f}%"
    if err is not None:
        row["rel_err"] = err
    if note:
        row["note"] = note
    return row


def entry_literal(family: str, device: str, best: dict) -> str:
    """The table row to paste into matmul_tuning.TABLE: measured classes replaced, the rest
    kept from the row this device reads now."""
    from dlc.compiler.codegen import matmul_tuning as tuning

    now = tuning.entry(device)
    row = {"wave": now["wave"], "shared_bytes": now["shared_bytes"], "short_chunk": now["short_chunk"]}
    for cls in tuning.CLASSES:
        row[cls] = best.get(cls, now[cls])
    kept = [c for c in tuning.CLASSES if c not in best]
    head = f"# measured by benchmarks/tune_matmul.py on {device!r}" + (f"; kept, not measured: {kept}" if kept else "")
    return head + "\n" + pprint.pformat({family: row}, sort_dicts=False, width=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="tiny sizes: a quick check anywhere (llvmpipe too)")
    p.add_argument("--classes", default="big,split,narrow,medium,thin,tile16", help="comma list of the classes to tune")
    p.add_argument("--budget", type=float, default=210.0, help="seconds for candidates (the rest are skipped)")
    p.add_argument("--reps", type=int, help="timed repetitions of each (20; --small 3)")
    p.add_argument("--warm", type=float, help="seconds each runs before timing (0.1; --small 0.01)")
    p.add_argument("--family", help="the table row to emit (default: this renderer's family)")
    p.add_argument("--out", help="write tune_matmul.json and tune_matmul.txt here")
    args = p.parse_args(argv)
    global REPS
    REPS = args.reps or (3 if args.small else 20)
    # hundreds of one-off programs: compile each, keep none in the user's program binary cache
    os.environ.setdefault("DLC_PROGRAM_BINARY_CACHE", "0")
    bench_gl.WARM_S = args.warm if args.warm is not None else (0.01 if args.small else 0.1)

    from dlc.compiler.codegen import matmul_tuning as tuning
    from dlc.runtime.device import get_context

    ctx = get_context()
    device = ctx.renderer
    family = args.family or tuning.family(device)
    torch, torch_dev = bench_gl.get_torch(set())
    print(f"GL renderer: {device} (table row {tuning.family(device)!r}); torch: {torch_dev}", flush=True)
    if not args.small:  # (a 2048^3 product: seconds a launch on a CPU renderer)
        bench_gl.warm_up(1.0)
    wanted = [c.strip() for c in args.classes.split(",") if c.strip()]
    for c in wanted:
        if c not in (*tuning.CLASSES, "tile16"):
            p.error(f"unknown class {c!r}: choose from {', '.join((*tuning.CLASSES, 'tile16'))}")
    shapes = SMALL_SHAPES if args.small else {**BIG_SHAPES, **MLP_SHAPES, **GPT_SHAPES}
    rng = np.random.default_rng(1)
    products: dict[str, list[Product]] = {}
    for shape, what in shapes.items():
        prod = Product(shape, what, torch, rng)
        cls = prod.size_class(device)
        if cls in wanted:
            products.setdefault(cls, []).append(prod)
    start = time.perf_counter()
    rows, best = tune(products, device, args.budget)
    text = bench_gl.table(
        rows, ["class", "product", "variant", "ms", "TFLOP/s", "of cuBLAS", "vs table now", "rel_err", "note"]
    )
    literal = entry_literal(family, device, best)
    print(text)
    print(f"\n{time.perf_counter() - start:.0f} s of tuning. The row for compiler/codegen/matmul_tuning.py TABLE:\n")
    print(literal, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "tune_matmul.json"), "w") as f:
            json.dump(
                {"device": device, "torch": torch_dev, "rows": rows, "best": best, "reps": REPS},
                f,
                indent=1,
                default=str,
            )
        with open(os.path.join(args.out, "tune_matmul.txt"), "w") as f:
            f.write(text + "\n\n" + literal + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
