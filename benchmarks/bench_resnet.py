"""ResNet-50 inference and a training step (issues 13 and 24's benchmark, not a test): the
onnx wheel's light ResNet-50 imported with `dlc import`, run by dlc on GL at batch 1 and 32,
against PyTorch eager (torchvision's ResNet-50, the same architecture, cuDNN with TF32 off)
and onnxruntime's CPU provider on the same ONNX file, in one process; then one SGD step at
batch 32 of the imported model fine-tuned with a cross-entropy on its output (its batch
norms imported as constant affine maps, so PyTorch's module runs its batch norms in eval
mode too), against the same step in PyTorch. Prints a markdown table of ms per batch. The
inference rows of dlc and PyTorch are timed in turn, call after call (`paired`).

    python benchmarks/bench_resnet.py [--reps 10] [--kernels] [--no-train] [--options JSON]

`--kernels` also prints dlc's GPU time per kind of kernel at each batch (timer queries, one
kernel at a time) beside the wall-clock eval: what the host adds is the difference.
`--options` passes codegen options (compiler/codegen/options.py) to dlc's programs, e.g.
`'{"conv_blocking": {"along_k": true}}'` for switches over every conv's own blocking.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
OPTIONS: dict = {}  # --options: codegen options of dlc's programs


def gl_backend():
    from dlc.backends.gl import GLBackend

    return GLBackend(OPTIONS)


def light_model() -> str:
    import onnx

    pattern = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/*resnet50*.onnx")
    return sorted(glob.glob(pattern))[0]


def timed(fn, reps: int) -> float:
    # warm: compile, upload, caches and the GPU's clocks: at least 5 calls and a second (on
    # the H100 a fresh batch-1 program ran 11 ms a call for its first ~25 calls, then 2.7)
    start = time.perf_counter()
    for i in itertools.count():
        fn()
        if i >= 4 and time.perf_counter() - start > 1.0:
            break
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def paired(fns: dict, reps: int) -> dict:
    """Median ms of each of `fns`, warmed as `timed` warms, then timed in turn rep after rep:
    both sides see the GPU's clocks alike (a light batch-1 loop lets them fall: either side
    measured alone moved by 3x between runs)."""
    for fn in fns.values():
        timed(fn, 1)
    times: dict = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


def print_kernels(sess, out_name: str, batch: int) -> None:
    """GPU ms of the eval program's kernels, by the first word of each kernel's description."""
    from bench_gl import per_kernel

    graph = sess.model.graph
    prog, ex = sess.backend.program(graph, [graph.names[out_name]], False, {"N": batch})
    heads = {k.name: k.source.split("\n")[1].split(": ", 1)[-1] for k in prog.kernels}
    table = per_kernel(ex, reps=3)
    kinds: dict[str, list[float]] = {}
    for row in table:
        kinds.setdefault((heads.get(row["kernel"]) or "?").split()[0].rstrip(":"), []).append(row["ms"])
    ranked = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
    total = sum(r["ms"] for r in table)
    print(
        f"batch {batch}: {len(table)} kernels, {total:.2f} GPU ms: "
        + ", ".join(f"{w} {len(v)} / {sum(v):.2f} ms" for w, v in ranked)
    )
    for row in sorted(table, key=lambda r: -r["ms"])[:12]:
        print(f"  {row['kernel']} {row['ms']:.3f} ms  {heads.get(row['kernel'], '')[:150]}")


def train_rows(imp, in_name: str, out_name: str, reps: int, batch: int = 32) -> list[tuple]:
    """One SGD step (lr 1e-3) at `batch` of the imported model under a cross-entropy on its
    output, dlc on GL and PyTorch eager, the images and labels on the host each step."""
    import dlc

    source = imp.source + f"input label: i32[N]\nloss cost = softmax_cross_entropy({out_name}, label)\n"
    sess = dlc.Session(dlc.compile(source), backend=gl_backend())
    sess.set_params(imp.weights)
    rng = np.random.default_rng(0)
    feeds = {in_name: rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    feeds["label"] = rng.integers(0, 1000, batch).astype(np.int32)
    opt = dlc.SGD(1e-3)
    name = f"ResNet-50 training step, batch {batch}"
    rows = [
        (
            name,
            "dlc GL (SGD, host in)",
            timed(lambda: sess.train(feeds, optimizer=opt, batch_size=batch, steps=1, shuffle=False), reps),
        )
    ]
    try:
        import torch
        import torchvision

        net = torchvision.models.resnet50().cuda().eval()  # batch norm as constant affine maps
        topt = torch.optim.SGD(net.parameters(), lr=1e-3)
        x, y = torch.from_numpy(feeds[in_name]), torch.from_numpy(feeds["label"]).long()

        def step():
            topt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(x.cuda()), y.cuda())
            loss.backward()
            topt.step()
            return loss.item()

        rows.append((name, "PyTorch eager (SGD, host in)", timed(step, reps)))
    except Exception as e:  # noqa: BLE001 - a missing comparison is reported, not fatal
        print(f"PyTorch training row skipped: {type(e).__name__}: {e}")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--kernels", action="store_true", help="GPU ms by kind of kernel")
    p.add_argument("--no-train", action="store_true", help="leave out the training-step rows")
    p.add_argument("--options", default="{}", help="codegen options for dlc's programs, as JSON")
    args = p.parse_args()
    OPTIONS.update(json.loads(args.options))
    import dlc

    path = light_model()
    # the light zoo builds its weights with ConstantOfShape: raise the folding limit
    imp = dlc.import_onnx(path, batch="N", max_const_bytes=1 << 30)
    (in_name,) = imp.inputs.values()
    (out_name,) = imp.outputs.values()
    rows = []
    sess = dlc.Session(imp.model, backend=gl_backend())
    sess.set_params(imp.weights)
    dlc_name = "dlc GL (eval: upload, kernels, read back)"
    torch_name = "PyTorch eager (cuda, torchvision), host in and out"
    net = None
    try:
        import torch
        import torchvision

        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        net = torchvision.models.resnet50().eval().cuda()
    except Exception as e:  # noqa: BLE001 - a missing comparison is reported, not fatal
        print(f"PyTorch rows skipped: {type(e).__name__}: {e}")
    for batch in (1, 32):
        x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
        fns = {dlc_name: lambda x=x: sess.eval(out_name, {in_name: x})}
        if net is not None:
            xt = torch.from_numpy(x)

            def run(xt=xt):
                with torch.no_grad():
                    return net(xt.cuda()).cpu()

            fns[torch_name] = run
        for name, ms in paired(fns, args.reps).items():  # dlc and PyTorch in turn
            rows.append((f"ResNet-50 batch {batch}", name, ms))
        if args.kernels:
            print_kernels(sess, out_name, batch)
    try:
        import onnxruntime as ort

        so = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = so.get_inputs()[0].name
        for batch in (1, 32):
            if so.get_inputs()[0].shape[0] not in (batch, None, "N") and batch != 1:
                continue  # the light model's batch is fixed at 1
            x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            rows.append(
                (
                    f"ResNet-50 batch {batch}",
                    "onnxruntime CPU",
                    timed(lambda x=x: so.run(None, {name: x}), max(2, args.reps // 3)),
                )
            )
    except Exception as e:  # noqa: BLE001
        print(f"onnxruntime rows skipped: {type(e).__name__}: {e}")
    if not args.no_train:
        rows += train_rows(imp, in_name, out_name, args.reps)
    print("| row | impl | ms |\n|---|---|---|")
    for r, impl, ms in rows:
        print(f"| {r} | {impl} | {ms:.3f} |")


if __name__ == "__main__":
    main()
