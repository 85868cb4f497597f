"""The exported MLP in headless Chromium against TensorFlow.js's WebGL backend (not a test).

    # once: TensorFlow.js into benchmarks/.tfjs/ (git-ignored; no install, the package alone)
    mkdir -p benchmarks/.tfjs && (cd benchmarks/.tfjs && npm pack @tensorflow/tfjs && tar xzf tensorflow-tfjs-*.tgz)
    # and the browser: apt-get install chromium-headless-shell; pip install "dlc[web]"
    python benchmarks/bench_web.py [--batch 32 128] [--steps 50] [--model samples/mlp_digits.dl]

The same model (samples/mlp_digits.dl: 64-64-10, ReLU, softmax cross-entropy), batch and
weights on both sides, in one page of one browser (flags as in tests/web: WebGL2 on
SwiftShader unless the browser finds a GPU). Each figure is the mean ms per step over
`--steps` steps after warm-up runs, the median of `--repeats` runs alternating between
the two:

- forward: upload a batch of pixels, run to `probs`, read `probs` back (one eval / one
  `data()` per step);
- train step: one SGD step on a batch (upload, forward, backward, update); the losses of all
  steps are read once at the end on both sides (dlc's `train({steps})`; tfjs's
  `optimizer.minimize(f, true)` losses stacked and read once).

Both sides' first-step loss and forward output are printed side by side to show they run the
same numbers.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import pathlib
import shutil
import sys
import tempfile
import threading

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
TFJS = HERE / ".tfjs" / "package" / "dist" / "tf.min.js"
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
FLAGS = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox"]

PAGE = """<!doctype html><meta charset="utf-8"><script src="tf.min.js"></script>
<script type="module">
import { load } from "./model/dlc.js";
window.bench = async ({ batch, steps, warmup, repeats, lr, pixels, labels }) => {
  await tf.setBackend("webgl");
  await tf.ready();
  const m = await load("./model/");
  const p = await m.params();
  const W1 = tf.variable(tf.tensor(p.W1.data, p.W1.shape)), b1 = tf.variable(tf.tensor(p.b1.data, p.b1.shape));
  const W2 = tf.variable(tf.tensor(p.W2.data, p.W2.shape)), b2 = tf.variable(tf.tensor(p.b2.data, p.b2.shape));
  const x = Float32Array.from(pixels), y = Float32Array.from(labels);
  const n = y.length;
  const rowsOf = (k) => [x.subarray(((k * batch) % n) * 64, ((k * batch) % n) * 64 + batch * 64),
                         y.subarray((k * batch) % n, (k * batch) % n + batch)];
  const logits = (px) => tf.relu(px.div(16).matMul(W1).add(b1)).matMul(W2).add(b2);

  // forward: upload, run, read probs
  const dlcForward = async (k) => {
    const out = await m.eval({ pixels: { data: rowsOf(k)[0], shape: [batch, 64] } }, ["probs"]);
    return out.probs.data;
  };
  const tfForward = async (k) => {
    const px = tf.tensor2d(rowsOf(k)[0], [batch, 64]);
    const probs = tf.tidy(() => tf.softmax(logits(px)));
    const out = await probs.data();
    px.dispose(); probs.dispose();
    return out;
  };
  const time = async (f, count) => {
    const t0 = performance.now();
    for (let k = 0; k < count; k++) await f(k);
    return (performance.now() - t0) / count;
  };
  const a = await dlcForward(0), b = await tfForward(0);
  let forwardDiff = 0;
  for (let i = 0; i < a.length; i++) forwardDiff = Math.max(forwardDiff, Math.abs(a[i] - b[i]));
  for (let k = 0; k < warmup; k++) { await dlcForward(k); await tfForward(k); }
  // alternating runs, the median of each side's (the machine's load drifts)
  const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
  const forwardRuns = { dlc: [], tfjs: [] };
  for (let r = 0; r < repeats; r++) {
    forwardRuns.dlc.push(await time(dlcForward, steps));
    forwardRuns.tfjs.push(await time(tfForward, steps));
  }
  const forward = { dlc: median(forwardRuns.dlc), tfjs: median(forwardRuns.tfjs) };

  // train steps: batches in order over the first steps*batch rows; losses read once at the end
  const feeds = { pixels: { data: x.subarray(0, n * 64), shape: [n, 64] }, labels: { data: y, shape: [n] } };
  const optimizer = tf.train.sgd(lr);
  const tfTrain = async (count) => {
    const losses = [];
    for (let k = 0; k < count; k++) {
      const [px, lb] = rowsOf(k);
      const xt = tf.tensor2d(px, [batch, 64]), yt = tf.tensor1d(lb, "int32");
      losses.push(optimizer.minimize(() => tf.losses.softmaxCrossEntropy(tf.oneHot(yt, 10), logits(xt)), true));
      xt.dispose(); yt.dispose();
    }
    const all = tf.stack(losses);
    const out = await all.data();
    tf.dispose([all, ...losses]);
    return out;
  };
  const firstDlc = (await m.train(feeds, { steps: 1, batchSize: batch }))[0];
  const firstTf = (await tfTrain(1))[0];
  await m.train(feeds, { steps: warmup, batchSize: batch });
  await tfTrain(warmup);
  const trainRuns = { dlc: [], tfjs: [] };
  for (let r = 0; r < repeats; r++) {
    let t0 = performance.now();
    await m.train(feeds, { steps, batchSize: batch });
    trainRuns.dlc.push((performance.now() - t0) / steps);
    t0 = performance.now();
    await tfTrain(steps);
    trainRuns.tfjs.push((performance.now() - t0) / steps);
  }
  m.dispose();
  return { forward, train: { dlc: median(trainRuns.dlc), tfjs: median(trainRuns.tfjs) }, forwardDiff, firstDlc, firstTf,
           renderer: tf.backend().gpgpu.gl.getParameter(tf.backend().gpgpu.gl.VERSION) };
};
window.benchReady = true;
</script>"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="samples/mlp_digits.dl")
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="alternating timed runs per side; the median is shown")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument(
        "--flags",
        default=" ".join(FLAGS),
        help="the browser's flags (default: WebGL2 on SwiftShader; on a GPU machine e.g. '--no-sandbox "
        "--use-angle=vulkan --enable-gpu')",
    )
    args = ap.parse_args()
    if not TFJS.exists():
        sys.exit(f"TensorFlow.js is missing at {TFJS}: see the top of {__file__} for how to get it")
    browser = next((p for p in BROWSERS if shutil.which(p)), None)
    if browser is None:
        sys.exit("no headless Chromium: apt-get install chromium-headless-shell")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit('playwright is missing: pip install "dlc[web]"')

    import dlc
    from dlc.web import export_web

    data = np.load(HERE.parent / "samples" / "data" / "digits_train.npz")
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        sess = dlc.Session(dlc.compile(args.model), backend="numpy", seed=0)
        np.savez(root / "w.npz", **sess.params)
        export_web(args.model, root / "model", weights=root / "w.npz", optimizer="sgd", lr=args.lr)
        shutil.copy(TFJS, root / "tf.min.js")
        (root / "bench.html").write_text(PAGE, encoding="utf-8")
        handler = functools.partial(_Quiet, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        rows = []
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=browser, args=args.flags.split())
            page = b.new_page()
            page.on("pageerror", lambda e: print("page error:", e, file=sys.stderr))
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/bench.html")
            page.wait_for_function("window.benchReady === true")
            for batch in args.batch:
                n = batch * (args.steps + args.warmup + 1)
                idx = np.arange(n) % len(data["labels"])
                r = page.evaluate(
                    "async (a) => await window.bench(a)",
                    {
                        "batch": batch,
                        "steps": args.steps,
                        "warmup": args.warmup,
                        "repeats": args.repeats,
                        "lr": args.lr,
                        "pixels": data["pixels"][idx].ravel().tolist(),
                        "labels": data["labels"][idx].astype(float).tolist(),
                    },
                )
                rows.append((batch, r))
            b.close()
        server.shutdown()
    renderer = rows[0][1]["renderer"] if rows else "?"
    print(f"browser: {browser} ({renderer}), model {args.model}, {args.steps} steps x {args.repeats} runs")
    print("| batch | step | dlc ms | tfjs-webgl ms | tfjs / dlc |")
    print("| --- | --- | --- | --- | --- |")
    for batch, r in rows:
        for what in ("forward", "train"):
            d, t = r[what]["dlc"], r[what]["tfjs"]
            print(f"| {batch} | {what} | {d:.2f} | {t:.2f} | {t / d:.2f}x |")
    for batch, r in rows:
        print(
            f"batch {batch}: forward max |dlc - tfjs| = {r['forwardDiff']:.2e}; "
            f"first-step loss dlc {r['firstDlc']:.6f}, tfjs {r['firstTf']:.6f}"
        )
    return 0


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
