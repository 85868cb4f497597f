"""The conv section of bench_gl.py: a small CNN's step, and single conv kernels next to the
matmul with the same multiply-adds, dlc GL against PyTorch eager (cuDNN, TF32 off) and the
NumPy backend, in one process. Timing helpers come from bench_gl.py."""

from __future__ import annotations

import numpy as np

CNN = """
input x: [B, 28, 28, 1]
input label: [B]
param W1: [5, 5, 1, 32] = he
param c1: [32]
param W2: [5, 5, 32, 64] = he
param c2: [64]
param W3: [3136, 128] = he
param c3: [128]
param W4: [128, 10] = glorot
param c4: [10]
h1 = max_pool(relu(conv2d(x, W1) + c1), 2)
h2 = max_pool(relu(conv2d(h1, W2) + c2), 2)
h3 = relu(reshape(h2, [B, 3136]) @ W3 + c3)
logits = h3 @ W4 + c4
loss cost = softmax_cross_entropy(logits, one_hot(label, 10))
"""


def _program(graph, roots, dims=None, options=None):
    from dlc.compiler.pipeline import compile_program
    from dlc.runtime.executor import Executor, LeafStore

    prog = compile_program(graph, roots, ref_dims=dims, options=options)
    return prog, Executor(prog.spec, prog.sources, LeafStore())


def cnn_rows(bg, batch: int, reps: int, torch, skip) -> list[dict]:
    """The issue's CNN: forward (cost) and SGD step, per-kernel table of the step."""
    import dlc

    rng = np.random.default_rng(0)
    data = {
        "x": rng.normal(size=(batch, 28, 28, 1)).astype(np.float32),
        "label": rng.integers(0, 10, size=batch).astype(np.float32),
    }
    model = dlc.compile(CNN)
    sess = dlc.Session(model, backend="gl", seed=0)
    opt = dlc.SGD(0.01)
    sess.train(data, optimizer=opt, batch_size=batch, steps=1)  # compiles, sets up the state
    backend = sess.backend
    step = sess._train_graph(None, opt)
    loss = step.names[step.losses[0]]
    dims = {"B": batch}
    compiled, ex = backend.program(step, [loss], True, dims)
    backend.step(step, [loss], {**data, "$lr": np.asarray(0.01, np.float32)}, dims)
    rows = [
        {
            "row": f"cnn SGD step, batch {batch}",
            "impl": "dlc GL kernels (GPU time)",
            "ms": bg.gl_gpu_ms(ex.launch, reps),
            "kernels": len(compiled.kernels),
        }
    ]
    bg.KERNEL_TABLES[f"CNN SGD step, batch {batch}"] = bg.per_kernel(ex)
    g = model.graph
    fwd, fex = backend.program(g, [g.names["cost"]], False, dims)
    fex.run(data, dims, [g.names["cost"]])  # uploads the batch; the params are in place
    rows.append(
        {
            "row": f"cnn forward, batch {batch}",
            "impl": "dlc GL kernels (GPU time)",
            "ms": bg.gl_gpu_ms(fex.launch, reps),
            "kernels": len(fwd.kernels),
        }
    )
    backend.close()
    if "numpy" not in skip:
        ns = dlc.Session(model, backend="numpy", seed=0)
        rows.append(
            {
                "row": f"cnn SGD step, batch {batch}",
                "impl": "NumPy backend",
                "ms": bg.median_ms(lambda: ns.train(data, optimizer=opt, batch_size=batch, steps=1), 2, warmup=1),
            }
        )
    if torch is not None:
        rows += _torch_cnn(bg, torch, data, batch, reps)
    return rows


def _torch_cnn(bg, torch, data, batch, reps) -> list[dict]:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    nn, F = torch.nn, torch.nn.functional
    net = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(3136, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    ).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.from_numpy(data["x"]).permute(0, 3, 1, 2).contiguous().to(dev)
    y = torch.from_numpy(data["label"]).long().to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    def forward():
        with torch.no_grad():
            F.cross_entropy(net(x), y)

    return [
        {
            "row": f"cnn SGD step, batch {batch}",
            "impl": f"PyTorch eager ({dev})",
            "ms": bg.torch_gpu_ms(torch, step, reps),
        },
        {
            "row": f"cnn forward, batch {batch}",
            "impl": f"PyTorch eager ({dev})",
            "ms": bg.torch_gpu_ms(torch, forward, reps),
        },
    ]


# (name, x [B, H, W, Cin], filter [kh, kw, Cin / groups, Cout], groups)
def conv_cases(small: bool) -> list[tuple]:
    if small:
        return [
            ("resnet 3x3 64->64", (2, 14, 14, 64), (3, 3, 64, 64), 1),
            ("cnn 5x5 32->64", (4, 28, 28, 32), (5, 5, 32, 64), 1),
            ("depthwise 3x3 x128", (2, 14, 14, 128), (3, 3, 1, 128), 128),
        ]
    return [
        ("resnet 3x3 64->64", (32, 56, 56, 64), (3, 3, 64, 64), 1),
        ("cnn 5x5 32->64", (64, 28, 28, 32), (5, 5, 32, 64), 1),
        ("depthwise 3x3 x128", (32, 56, 56, 128), (3, 3, 1, 128), 128),
    ]


def _op_graph(op, xs, ws, groups):
    from dlc.compiler.builder import GraphBuilder

    b = GraphBuilder()
    attrs = {"stride": (1, 1), "padding": "same"}
    if groups > 1:
        attrs["groups"] = groups
    ys = (*xs[:3], ws[3])
    if op == "conv2d":
        ins = {"x": xs, "w": ws}
        extra = {}
    elif op == "conv2d_grad_input":
        ins, extra = {"dy": ys, "w": ws}, {"x_shape": xs}
    else:
        ins, extra = {"x": xs, "dy": ys}, {"w_shape": ws}
    ids = [b.input(k, s) for k, s in ins.items()]
    y = b.add(op, ids, **attrs, **extra)
    b.declare("y", y, None)
    return b.build(), y, ins


def conv_kernel_rows(bg, small: bool, reps: int, torch, skip) -> list[dict]:
    """Each conv kernel (forward, input and filter gradient) against the matmul with its
    multiply-adds, cuDNN and NumPy."""
    rng = np.random.default_rng(0)
    rows = []
    for name, xs, ws, groups in conv_cases(small):
        bsz, h, w, cin = xs
        kh, kw, _, cout = ws
        macs = bsz * h * w * kh * kw * ws[2] * cout
        ops = ("conv2d",) if groups > 1 else ("conv2d", "conv2d_grad_input", "conv2d_grad_filter")
        for op in ops:
            g, y, ins = _op_graph(op, xs, ws, groups)
            feeds = {k: rng.normal(size=s).astype(np.float32) for k, s in ins.items()}
            prog, ex = _program(g, [y])
            ex.upload(feeds, {})
            ms = bg.gl_gpu_ms(ex.launch, reps)
            how = prog.kernels[0].source.split("\n")[1].split(": ", 1)[-1][:90]
            row = f"{name} {op.replace('conv2d', 'conv').replace('_', ' ')}"
            rows.append({"row": row, "impl": f"dlc GL ({how})", "ms": ms, "TFLOP/s": 2 * macs / ms / 1e9})
            ex.delete()
            # the matmul with the same multiply-adds
            m, k, n = {
                "conv2d": (bsz * h * w, kh * kw * ws[2], cout),
                "conv2d_grad_input": (bsz * h * w, kh * kw * cout, cin),
                "conv2d_grad_filter": (kh * kw * cin, bsz * h * w, cout),
            }[op]
            if groups > 1:  # depthwise: the same multiply-adds as [B*H*W, 9] x [9, C]
                m, k, n = bsz * h * w, kh * kw, groups
            a = rng.normal(size=(m, k)).astype(np.float32)
            b = rng.normal(size=(k, n)).astype(np.float32)
            src = f"input a: [{m}, {k}]\ninput b: [{k}, {n}]\ny = a @ b\n"
            mprog, mex = bg.gl_program(src)
            mex.upload({"a": a, "b": b}, {})
            mms = bg.gl_gpu_ms(mex.launch, reps)
            rows.append(
                {
                    "row": row,
                    "impl": f"dlc GL matmul [{m}, {k}] x [{k}, {n}]",
                    "ms": mms,
                    "TFLOP/s": 2 * m * k * n / mms / 1e9,
                }
            )
            mex.delete()
            if torch is not None:
                rows.append(_torch_conv(bg, torch, op, feeds, xs, ws, groups, reps, row, macs))
            if "numpy" not in skip and op == "conv2d":
                from dlc.compiler.reference import evaluate

                nms = bg.median_ms(lambda g=g, y=y, feeds=feeds: evaluate(g, [y], feeds, {}), 1, warmup=0)
                rows.append({"row": row, "impl": "NumPy reference", "ms": nms, "TFLOP/s": 2 * macs / nms / 1e9})
    return rows


def _torch_conv(bg, torch, op, feeds, xs, ws, groups, reps, row, macs) -> dict:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    F = torch.nn.functional

    def nchw(a):
        return torch.from_numpy(a).permute(0, 3, 1, 2).contiguous().to(dev)

    wt = torch.from_numpy(feeds["w"] if "w" in feeds else np.zeros(ws, np.float32))
    wt = wt.permute(3, 2, 0, 1).contiguous().to(dev)
    pad = (ws[0] // 2, ws[1] // 2)
    if op == "conv2d":
        x = nchw(feeds["x"])

        def fn():
            F.conv2d(x, wt, padding=pad, groups=groups)
    elif op == "conv2d_grad_input":
        dy = nchw(feeds["dy"])
        shape = (xs[0], xs[3], xs[1], xs[2])

        def fn():
            torch.nn.grad.conv2d_input(shape, wt, dy, padding=pad, groups=groups)
    else:
        x, dy = nchw(feeds["x"]), nchw(feeds["dy"])
        shape = (ws[3], ws[2], ws[0], ws[1])

        def fn():
            torch.nn.grad.conv2d_weight(x, shape, dy, padding=pad, groups=groups)

    ms = bg.torch_gpu_ms(torch, fn, reps)
    what = "cuDNN, TF32 off" if dev == "cuda" else "cpu"
    return {"row": row, "impl": f"PyTorch ({what})", "ms": ms, "TFLOP/s": 2 * macs / ms / 1e9}
