"""The texture target against the compute target, in one process: prints a table (not a test).

    python benchmarks/bench_texture.py            # full sizes, for a GPU
    python benchmarks/bench_texture.py --small    # a quick run anywhere (Mesa llvmpipe too)

Rows (the issue's three and a conv): a fused chain of 8 elementwise ops over N floats, an fp32
matmul M x M x M, a 3x3 conv2d, and an MLP 784-1024-1024-10 training step (SGD) at batch B.
Each figure is the median wall-clock time of running the program's kernels on data already on
the GPU, synchronized with glFinish (no uploads or read-backs), after two warm-up runs. The "loop" column is the
texture target with its matmuls and convs as the per-output loop (the packed passes of
compiler/codegen/texture_matmul.py turned off), for what packing gains.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_gl import CHAIN, MLP  # noqa: E402


def time_program(
    target: str, source: str, roots: list[str], feeds: dict, dims: dict, reps: int, train: bool = False
) -> float:
    import dlc
    from dlc.backends.gl import GLBackend
    from dlc.runtime.gl import GL

    model = dlc.compile(source)
    backend = GLBackend(target=target)
    sess = dlc.Session(model, backend="numpy")
    for name, v in sess.params.items():
        backend.set_leaf(name, v)
    graph = model.graph
    if train:
        from dlc.compiler.train_graph import build_train_graph

        graph = build_train_graph(graph, None, dlc.SGD(0.01))
        feeds = {**feeds, **{n: np.zeros(graph.shape(n), np.float32) for n in graph.states}}
        for n in graph.states:
            backend.set_leaf(n, feeds.pop(n))
        nodes = [graph.names[graph.losses[0]]]
    else:
        nodes = [graph.names[r] for r in roots]
    _, ex = backend.program(graph, nodes, train, dims)
    ex.upload(feeds, dims)
    times = []
    for k in range(reps + 2):
        GL.glFinish()
        t0 = time.perf_counter()
        ex.launch()
        GL.glFinish()
        if k >= 2:
            times.append((time.perf_counter() - t0) * 1e3)
    backend.close()
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="small sizes for a quick run")
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args(argv)
    n, m, batch = (1 << 20, 256, 64) if a.small else (1 << 24, 2048, 1024)
    cb, hw, ci = (8, 28, 16) if a.small else (32, 56, 64)
    rng = np.random.default_rng(0)
    from dlc.runtime.device import get_context

    ctx = get_context()
    print(f"{ctx.renderer} ({ctx.version}); median of {a.reps} runs, ms")
    cases = [
        (
            f"chain of 8 ops, {n} floats",
            CHAIN.format(n=n),
            ["y"],
            {"x": rng.normal(size=n).astype(np.float32)},
            {},
            False,
        ),
        (
            f"matmul {m}^3",
            f"input a: [{m}, {m}]\ninput b: [{m}, {m}]\nc = a @ b\n",
            ["c"],
            {"a": rng.normal(size=(m, m)), "b": rng.normal(size=(m, m))},
            {},
            False,
        ),
        (
            f"conv2d 3x3 'same', [{cb}, {hw}, {hw}, {ci}] -> {ci} channels",
            f"input x: [{cb}, {hw}, {hw}, {ci}]\ninput k: [3, 3, {ci}, {ci}]\n"
            'y = conv2d(x, k, stride=1, padding="same")\n',
            ["y"],
            {"x": rng.normal(size=(cb, hw, hw, ci)), "k": rng.normal(size=(3, 3, ci, ci)) * 0.1},
            {},
            False,
        ),
        (
            f"MLP 784-1024-1024-10 SGD step, batch {batch}",
            MLP,
            [],
            {"x": rng.normal(size=(batch, 784)), "label": rng.integers(0, 10, batch) * 1.0, "$lr": np.float32(0.01)},
            {"B": batch},
            True,
        ),
    ]
    from dlc.compiler.codegen import texture_matmul

    print("| work | compute ms | texture ms | texture / compute | texture, per-output loop ms |")
    print("| --- | --- | --- | --- | --- |")
    for what, source, roots, feeds, dims, train in cases:
        got = {t: time_program(t, source, roots, feeds, dims, a.reps, train) for t in ("compute", "texture")}
        loop = "-"
        if "@" in source or "conv2d" in source:
            packed = texture_matmul.MIN_DEPTH, texture_matmul.CONV_MIN_CHANNELS
            texture_matmul.MIN_DEPTH = texture_matmul.CONV_MIN_CHANNELS = 1 << 62
            try:
                loop = f"{time_program('texture', source, roots, feeds, dims, a.reps, train):.3g}"
            finally:
                texture_matmul.MIN_DEPTH, texture_matmul.CONV_MIN_CHANNELS = packed
        ratio = got["texture"] / got["compute"]
        print(f"| {what} | {got['compute']:.3g} | {got['texture']:.3g} | {ratio:.2f}x | {loop} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
