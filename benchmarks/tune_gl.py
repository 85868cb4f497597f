"""Experiments behind the choices in the GL code generator (not a test; see BENCHMARKS.md).

    python benchmarks/tune_gl.py [--small] [--out DIR]

- bandwidth: the one-op and 8-op elementwise kernels at several work-group sizes, after a
  warm-up that lets the GPU clocks rise; the same kernel over buffers made with
  glBufferStorage instead of glBufferData; glCopyBufferSubData; PyTorch's copy for the ceiling;
- matmul: each blocking (tile M x N, K-slab, outputs per invocation), with and without
  register prefetch, at M = N = K = 4096 and on the shapes of the MLP benchmark's step; each
  result checked against NumPy/PyTorch.
- `--mlp`: only matmuls, on every product of the MLP benchmark's training step (forward,
  and backward with its transposed operands, the thin 10-wide ones too), over the blockings
  in MLP_BLOCKINGS (K-groups inside a work group, swizzled fetch, slab depths, tile shapes),
  plus the large default with and without the swizzled fetch at 4096^3.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gl import CHAIN, COPY, MLP_SHAPES, chain_numpy, gl_gpu_ms, gl_program, table, warm_up  # noqa: E402

BLOCKINGS = [
    (128, 128, 8, 8, 8),
    (128, 128, 16, 8, 8),
    (256, 128, 8, 8, 8),
    (128, 256, 8, 8, 8),
    (128, 64, 8, 8, 4),
    (64, 128, 8, 4, 8),
    (64, 64, 16, 4, 4),
    (64, 64, 8, 4, 4),
]

# Blockings: (tm, tn, bk, rm, rn[, ks K-groups per work group[, swizzled fetch]]).
MLP_BLOCKINGS = [
    (64, 64, 16, 4, 4, 1, False),
    (64, 64, 16, 4, 4),
    (64, 64, 32, 4, 4),
    (64, 64, 16, 4, 4, 2),
    (64, 64, 32, 4, 4, 2),
    (64, 64, 32, 8, 8, 4),
    (64, 64, 64, 8, 8, 4),
    (64, 64, 32, 8, 4, 2),
    (64, 64, 16, 8, 4),
    (128, 64, 16, 8, 4),
    (64, 128, 16, 4, 8),
    (128, 128, 16, 8, 8),
    (128, 64, 32, 8, 4, 2),
    (32, 64, 32, 4, 4, 2),
    (64, 32, 32, 4, 4, 2),
    (128, 64, 32, 8, 4, 2, False),
    (128, 64, 32, 8, 4),
    (128, 64, 16, 8, 4, 2),
    (64, 128, 32, 4, 8, 2),
    (64, 64, 64, 4, 4, 4),
]
THIN_BLOCKINGS = [(16, 16, 64, 4, 4, 16), (32, 16, 64, 4, 4, 8), (16, 16, 32, 4, 4, 8), (64, 16, 64, 4, 4, 4)]


class StorageBuffer:
    """A buffer made with glNamedBufferStorage (immutable size), to compare placement."""

    def __init__(self, nbytes: int):
        from dlc.runtime.gl import GL

        h = ctypes.c_uint(0)
        GL.glCreateBuffers(1, ctypes.byref(h))
        GL.glNamedBufferStorage(h.value, nbytes, None, GL.GL_DYNAMIC_STORAGE_BIT)
        self.handle, self.nbytes, self.capacity = h.value, nbytes, nbytes

    def upload(self, array) -> None:
        from dlc.runtime.gl import GL

        data = np.ascontiguousarray(array, np.float32)
        GL.glNamedBufferSubData(self.handle, 0, data.nbytes, ctypes.c_void_p(data.ctypes.data))

    def download(self, count: int) -> np.ndarray:
        from dlc.runtime.gl import GL

        out = np.empty(count, np.float32)
        GL.glGetNamedBufferSubData(self.handle, 0, out.nbytes, ctypes.c_void_p(out.ctypes.data))
        return out

    def delete(self) -> None:
        from dlc.runtime.gl import GL

        if self.handle:
            GL.glDeleteBuffers(1, ctypes.byref(ctypes.c_uint(self.handle)))
            self.handle = 0


def bandwidth(n: int, reps: int, torch) -> list[dict]:
    from dlc.runtime.gl import GL

    rows = []
    nbytes = 8 * n
    x = np.random.default_rng(0).normal(size=n).astype(np.float32)
    for name, src in (("copy kernel", COPY), ("8-op chain", CHAIN)):
        for local in (64, 128, 256, 512, 1024):
            prog, ex = gl_program(src.format(n=n), {"elementwise_local": local})
            ex.upload({"x": x}, {})
            ms = gl_gpu_ms(ex.launch, reps)
            rows.append({"what": f"{name}, local {local}", "ms": ms, "GB/s": nbytes / ms / 1e6})
            if local == 256:
                # the same kernel over glBufferStorage buffers
                for s, slot in enumerate(ex.slots):
                    if slot["kind"] in ("temp", "input"):
                        ex.buffers[s].delete()
                        ex.buffers[s] = StorageBuffer(4 * n)
                ex._dims = None
                ex.upload({"x": x}, {})
                ms = gl_gpu_ms(ex.launch, reps)
                y = ex.run({"x": x}, {}, [prog.spec.roots[0]])[0]
                want = -x if name == "copy kernel" else chain_numpy(x)
                rows.append(
                    {
                        "what": f"{name}, local 256, glBufferStorage buffers",
                        "ms": ms,
                        "GB/s": nbytes / ms / 1e6,
                        "err": float(np.max(np.abs(y - want))),
                    }
                )
            ex.delete()
    from dlc.runtime.storage import Buffer

    for label, make in (("glBufferData", Buffer), ("glBufferStorage", StorageBuffer)):
        a, b = make(4 * n), make(4 * n)
        ms = gl_gpu_ms(lambda a=a, b=b: GL.glCopyNamedBufferSubData(a.handle, b.handle, 0, 0, 4 * n), reps)
        rows.append({"what": f"glCopyBufferSubData ({label} buffers)", "ms": ms, "GB/s": nbytes / ms / 1e6})
        a.delete()
        b.delete()
    if torch is not None and torch.cuda.is_available():
        t = torch.from_numpy(x).cuda()
        out = torch.empty_like(t)
        from bench_gl import torch_gpu_ms

        ms = torch_gpu_ms(torch, lambda: out.copy_(t), reps)
        rows.append({"what": "PyTorch copy_", "ms": ms, "GB/s": nbytes / ms / 1e6})
    return rows


def matmul(shapes, reps: int, torch, blockings=None, variants=("tile16",), no_prefetch: bool = True) -> list[dict]:
    rows = []
    rng = np.random.default_rng(1)
    for m, k, n, ta, tb in shapes:
        blks = blockings(m, n) if callable(blockings) else (blockings or BLOCKINGS)
        a_shape = (k, m) if ta else (m, k)
        b_shape = (n, k) if tb else (k, n)
        a = rng.normal(size=a_shape).astype(np.float32)
        b = rng.normal(size=b_shape).astype(np.float32)
        A, B = (a.T if ta else a), (b.T if tb else b)
        if torch is not None and torch.cuda.is_available():
            ta_, tb_ = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
            from bench_gl import torch_gpu_ms

            ms = torch_gpu_ms(torch, lambda ta_=ta_, tb_=tb_: ta_ @ tb_, reps)
            want = (ta_.double() @ tb_.double()).cpu().numpy()
            rows.append(
                {
                    "shape": f"{m}x{k}x{n} ta={ta:d} tb={tb:d}",
                    "what": "PyTorch fp32",
                    "ms": ms,
                    "TFLOP/s": 2 * m * n * k / ms / 1e9,
                }
            )
        else:
            want = A.astype(np.float64) @ B.astype(np.float64)
        for blk in blks:
            for prefetch in (True, False):
                if not prefetch and (blk != blks[0] or not no_prefetch):
                    continue
                try:
                    ms, err = _time_matmul(a, b, ta, tb, {"blocking": blk, "prefetch": prefetch}, want, reps)
                except Exception as exc:  # a blocking the driver refuses: say so, go on
                    rows.append({"shape": f"{m}x{k}x{n}", "what": f"{blk} failed: {exc}"[:120]})
                    continue
                extra = (f" ks {blk[5]}" if len(blk) > 5 and blk[5] > 1 else "") + (
                    " unswizzled" if len(blk) > 6 and not blk[6] else ""
                )
                rows.append(
                    {
                        "shape": f"{m}x{k}x{n} ta={ta:d} tb={tb:d}",
                        "what": f"tile {blk[0]}x{blk[1]} bk {blk[2]} per-thread "
                        f"{blk[3]}x{blk[4]}{extra}"
                        f"{'' if prefetch else ' no prefetch'}",
                        "ms": ms,
                        "TFLOP/s": 2 * m * n * k / ms / 1e9,
                        "rel_err": err,
                    }
                )
        for variant in variants:
            ms, err = _time_matmul(a, b, ta, tb, {"matmul": variant}, want, reps)
            rows.append(
                {
                    "shape": f"{m}x{k}x{n} ta={ta:d} tb={tb:d}",
                    "what": variant,
                    "ms": ms,
                    "TFLOP/s": 2 * m * n * k / ms / 1e9,
                    "rel_err": err,
                }
            )
    return rows


def _time_matmul(a, b, ta, tb, options, want, reps):
    from dlc.compiler.builder import GraphBuilder
    from dlc.compiler.pipeline import compile_program
    from dlc.runtime.executor import Executor, LeafStore

    g = GraphBuilder()
    ia, ib = g.input("a", a.shape), g.input("b", b.shape)
    y = g.add("matmul", [ia, ib], ta=ta, tb=tb)
    prog = compile_program(g.build(), [y], options=options)
    ex = Executor(prog.spec, prog.sources, LeafStore())
    ex.upload({"a": a, "b": b}, {})
    ms = gl_gpu_ms(ex.launch, reps)
    out = ex.run({"a": a, "b": b}, {}, [y])[0]
    ex.delete()
    return ms, float(np.max(np.abs(out - want)) / np.max(np.abs(want)))


def dump_binary(out_dir: str) -> None:
    """NVIDIA's program binary holds its assembly as text: keep it to look for spills."""
    from dlc.runtime.gl import GL

    prog, ex = gl_program("input a: [4096, 4096]\ninput b: [4096, 4096]\ny = a @ b\n")
    handle = ex.programs[0].handle
    length = ctypes.c_int(0)
    GL.glGetProgramiv(handle, GL.GL_PROGRAM_BINARY_LENGTH, ctypes.byref(length))
    buf = (ctypes.c_ubyte * max(length.value, 1))()
    fmt = ctypes.c_uint(0)
    got = ctypes.c_int(0)
    GL.glGetProgramBinary(handle, length.value, ctypes.byref(got), ctypes.byref(fmt), buf)
    with open(os.path.join(out_dir, "matmul_big.bin"), "wb") as f:
        f.write(bytes(buf[: got.value]))
    with open(os.path.join(out_dir, "matmul_big.glsl"), "w") as f:
        f.write(next(iter(prog.sources.values())))
    ex.delete()


def tune_mlp(args, reps: int, torch) -> int:
    if args.small:
        shapes = {(96, 130, 72, True, False): "small", (96, 70, 10, False, False): "thin"}
    else:
        shapes = MLP_SHAPES
    mm = matmul(
        list(shapes),
        reps,
        torch,
        blockings=lambda m, n: THIN_BLOCKINGS if n < 64 else MLP_BLOCKINGS,
        variants=("tile16", "medium"),
        no_prefetch=False,
    )
    big = (
        []
        if args.small
        else matmul(
            [(4096, 4096, 4096, False, False), (4096, 4096, 4096, False, True)],
            reps,
            torch,
            blockings=[(128, 128, 16, 8, 8), (128, 128, 16, 8, 8, 1, False)],
            variants=(),
            no_prefetch=False,
        )
    )
    for r in mm:
        key = tuple(int(x) if x.isdigit() else x == "ta=1" or x == "tb=1" for x in r["shape"].replace("x", " ").split())
        r["product"] = shapes.get(key, "")
    print(table(mm + big, ["shape", "product", "what", "ms", "TFLOP/s", "rel_err"]), flush=True)
    with open(os.path.join(args.out, "tune_mlp.json"), "w") as f:
        json.dump({"matmul": mm + big, "median_of": reps}, f, indent=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--small", action="store_true")
    p.add_argument("--out", default=".")
    p.add_argument("--mlp", action="store_true", help="only the MLP step's matmuls")
    args = p.parse_args(argv)
    from bench_gl import get_torch

    torch, dev = get_torch(set())
    n = 1 << 20 if args.small else 64 << 20
    reps = 3 if args.small else 20
    warm_up(0.3 if args.small else 2.0)
    if args.mlp:
        return tune_mlp(args, reps, torch)
    bw = bandwidth(n, reps, torch)
    print(table(bw, ["what", "ms", "GB/s", "err"]), flush=True)
    if args.small:
        shapes = [(256, 64, 192, False, False), (96, 130, 72, True, False)]
    else:
        shapes = [
            (4096, 4096, 4096, False, False),
            (1024, 784, 1024, False, False),
            (784, 1024, 1024, True, False),
            (1024, 1024, 1024, False, True),
        ]
    mm = matmul(shapes, reps, torch)
    print(table(mm, ["shape", "what", "ms", "TFLOP/s", "rel_err"]), flush=True)
    try:
        dump_binary(args.out)
    except Exception as exc:
        print("no program binary:", exc)
    with open(os.path.join(args.out, "tune.json"), "w") as f:
        json.dump({"bandwidth": bw, "matmul": mm, "median_of": reps}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
