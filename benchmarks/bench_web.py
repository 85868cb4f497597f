"""Web exports in headless Chromium against TensorFlow.js and onnxruntime-web (not a test).

    # once: the other libraries into benchmarks/.tfjs/ and benchmarks/.ort/ (git-ignored; the
    # packages alone, no install)
    mkdir -p benchmarks/.tfjs && (cd benchmarks/.tfjs && npm pack @tensorflow/tfjs && tar xzf tensorflow-tfjs-*.tgz)
    mkdir -p benchmarks/.ort && (cd benchmarks/.ort && npm pack onnxruntime-web && tar xzf onnxruntime-web-*.tgz)
    # and the browser: apt-get install chromium-headless-shell; pip install "dlc[web,onnx]"
    python benchmarks/bench_web.py [--rows digits,mlp,...] [--steps 5] [--repeats 3]

Every row runs the same model, batch and weights on each side, in one page of one browser
(flags as in tests/web: WebGL2 on SwiftShader unless the browser finds a GPU; the GPU
program cache off, so that each start-up compiles its shaders). A figure is the mean ms per
step over `--steps` steps after `--warmup` untimed ones, the median of `--repeats` runs that
alternate between the sides (the machine's load drifts); the ratio is other / dlc.js (above 1:
dlc.js is faster). The rows (`--rows`, comma-separated; default all):

- digits: samples/mlp_digits.dl (64-64-10) at batch `--digits-batch`: forward (upload a batch,
  run to `probs`, read it) and one SGD step, against tfjs-webgl;
- mlp / mlp-sgd: an MLP 784-1024-1024-10 (ReLU, softmax cross-entropy) at batch 128: forward,
  and one SGD step, against tfjs-webgl;
- matmul: x[512, 512] @ W[512, 512] (x uploaded, the product read back), against tfjs-webgl;
- cnn / cnn-adam: samples/cnn_digits.dl at batch 64: forward, and one Adam step, against
  tfjs-webgl;
- squeezenet: SqueezeNet 1.1 from the onnx wheel's light models, batch 1, imported by dlc and
  run by onnxruntime-web (webgl and wasm backends, one thread) from the same .onnx;
- small-cnn: a small CNN made here as an .onnx (three conv-ReLU-pool stages, a Gemm, softmax;
  [1, 3, 64, 64]), the same way;
- startup: SqueezeNet's first call (load the export / create the session, then the first
  result), each time on a fresh context (in the one browser: what its GPU process keeps between
  contexts stays); dlc.js's phases of each (files, compile, warm-up, first eval) are printed
  after the table.

`--profile` times nothing: it runs one step of each row's dlc.js side (after an untimed one)
with each pass timed alone (`gl.readPixels` of one texel before and after it) and prints the
passes summed by program, largest first: where dlc.js's time goes.

Training steps read their losses once at the end on both sides (dlc's `train({steps})`;
tfjs's `optimizer.minimize(f, true)` losses stacked and read once). Each row prints the
largest difference between the sides' first outputs (or first-step losses) to show they run
the same numbers.
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
ORT = HERE / ".ort" / "package" / "dist"
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
FLAGS = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox", "--disable-gpu-program-cache"]
ROWS = ("digits", "mlp", "mlp-sgd", "matmul", "cnn", "cnn-adam", "squeezenet", "small-cnn", "startup")
ORT_ROWS = ("squeezenet", "small-cnn", "startup")
FOLD_BYTES = 2**30  # squeezenet's weights are constants folded at import

MLP = """input pixels: [B, 784]
input labels: [B]
param W1: [784, 1024] = he
param b1: [1024]
param W2: [1024, 1024] = he
param b2: [1024]
param W3: [1024, 10] = glorot
param b3: [10]
h1 = relu(pixels @ W1 + b1)
h2 = relu(h1 @ W2 + b2)
logits = h2 @ W3 + b3
probs = softmax(logits)
loss cost = softmax_cross_entropy(logits, one_hot(labels, 10))
"""

MATMUL = """input x: [512, 512]
param W: [512, 512] = glorot
y = x @ W
"""

# The page: window.rows[name](arg) -> {sides: {name: async (k) => output}, train: {name: async
# (count) => losses}, ...}; window.bench times them.
PAGE = """<!doctype html><meta charset="utf-8"><script src="tf.min.js"></script>
<script src="ort/ort.all.min.js"></script>
<script type="module">
import { load } from "./dlc.js";
if (typeof ort !== "undefined") { // (absent when no row needs it)
  ort.env.wasm.wasmPaths = new URL("./ort/", location.href).href;
  ort.env.wasm.numThreads = 1; // no cross-origin isolation here, and 2 shared cores
}
const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
const maxDiff = (a, b) => { let d = 0; for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i])); return d; };
// a seeded uniform [lo, hi) (the same inputs every run)
const rand = (n, seed, lo = 0, hi = 1) => {
  const out = new Float32Array(n); let s = seed >>> 0;
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; out[i] = lo + (hi - lo) * (s / 4294967296); }
  return out;
};
const labelsOf = (n, seed) => rand(n, seed, 0, 10).map(Math.floor);
const variables = (p) => Object.fromEntries(Object.entries(p).map(([n, v]) => [n, tf.variable(tf.tensor(v.data, v.shape))]));

// one side's forward: feeds -> Float32Array, `count` times (each awaited)
async function tfRead(f) { const t = tf.tidy(f); const out = await t.data(); t.dispose(); return out; }
async function tfTrain(optimizer, count, loss) {
  const losses = [];
  for (let k = 0; k < count; k++) losses.push(optimizer.minimize(loss, true));
  const all = tf.stack(losses); const out = await all.data(); tf.dispose([all, ...losses]); return out;
}

const mlpLogits = (v, px) => tf.relu(tf.relu(px.matMul(v.W1).add(v.b1)).matMul(v.W2).add(v.b2)).matMul(v.W3).add(v.b3);
const digitsLogits = (v, px) => tf.relu(px.div(16).matMul(v.W1).add(v.b1)).matMul(v.W2).add(v.b2);
const cnnLogits = (v, px, batch) => {
  const images = px.div(16).reshape([batch, 8, 8, 1]);
  const h1 = tf.maxPool(tf.relu(tf.conv2d(images, v.K1, 1, "same").add(v.c1)), 2, 2, "valid");
  const h2 = tf.maxPool(tf.relu(tf.conv2d(h1, v.K2, 1, "same").add(v.c2)), 2, 2, "valid");
  return h2.reshape([batch, 128]).matMul(v.W).add(v.b);
};

// A classifier row: forward (probs) or a training step, dlc against tfjs with dlc's weights.
async function classifier(dir, arg, logits, features, optimizer) {
  const m = await load(dir);
  const v = variables(await m.params());
  const { batch, train } = arg;
  const n = batch * 4;
  const x = arg.pixels ? Float32Array.from(arg.pixels) : rand(n * features, 1, 0, 1);
  const y = arg.labels ? Float32Array.from(arg.labels) : labelsOf(n, 2);
  const rows = Math.min(n, y.length);
  const at = (k) => ((k * batch) % rows);
  const px = (k) => x.subarray(at(k) * features, (at(k) + batch) * features);
  const lb = (k) => y.subarray(at(k), at(k) + batch);
  const sides = {};
  if (!train) {
    sides.dlc = async (k) => (await m.eval({ pixels: { data: px(k), shape: [batch, features] } }, ["probs"])).probs.data;
    sides.tfjs = async (k) => {
      const t = tf.tensor2d(px(k), [batch, features]);
      const out = await tfRead(() => tf.softmax(logits(v, t, batch)));
      t.dispose();
      return out;
    };
    return { sides, model: m, dispose: () => { m.dispose(); tf.dispose(Object.values(v)); } };
  }
  const feeds = { pixels: { data: x.subarray(0, batch * features), shape: [batch, features] }, labels: { data: y.subarray(0, batch), shape: [batch] } };
  const opt = optimizer();
  const xt = tf.tensor2d(px(0), [batch, features]), yt = tf.oneHot(tf.tensor1d(lb(0), "int32"), 10);
  sides.dlc = async (count) => await m.train(feeds, { steps: count, batchSize: batch });
  sides.tfjs = async (count) => await tfTrain(opt, count, () => tf.losses.softmaxCrossEntropy(yt, logits(v, xt, batch)));
  return { sides, steps: true, model: m, dispose: () => { m.dispose(); tf.dispose([xt, yt, ...Object.values(v)]); } };
}

// An imported ONNX model: dlc's export against onnxruntime-web's webgl and wasm sessions.
async function imported(dir, arg) {
  const m = await load(dir);
  const x = rand(arg.shape.reduce((a, b) => a * b, 1), 3, 0, 1);
  const sessions = {};
  for (const ep of ["webgl", "wasm"]) sessions[ep] = await ort.InferenceSession.create(dir + "model.onnx", { executionProviders: [ep] });
  const sides = {};
  sides.dlc = async () => (await m.eval({ [arg.input]: { data: x, shape: arg.shape } }, [arg.output]))[arg.output].data;
  for (const [ep, s] of Object.entries(sessions)) {
    sides[`ort-${ep}`] = async () => {
      const out = await s.run({ [arg.onnxInput]: new ort.Tensor("float32", x, arg.shape) });
      return out[arg.onnxOutput].data;
    };
  }
  return { sides, model: m, dispose: () => { m.dispose(); Object.values(sessions).forEach((s) => s.release()); } };
}

// The first call on a fresh context: load (or create) and the first result. dlc.js's phases
// (ms from the start, from onProgress) go to window.phases: the files fetched and checked, the
// shaders compiled, the warm-up drawn, load's end and the first result's.
window.phases = [];
async function startup(dir, arg) {
  const x = rand(arg.shape.reduce((a, b) => a * b, 1), 3, 0, 1);
  const sides = {
    dlc: async () => {
      const t0 = performance.now();
      const at = {};
      const m = await load(dir, { onProgress: ({ stage }) => { at[stage] = performance.now() - t0; } });
      at.load = performance.now() - t0;
      const out = (await m.eval({ [arg.input]: { data: x, shape: arg.shape } }, [arg.output]))[arg.output].data;
      at.first = performance.now() - t0;
      window.phases.push(at);
      m.dispose();
      return out;
    },
    "ort-webgl": async () => {
      const s = await ort.InferenceSession.create(dir + "model.onnx", { executionProviders: ["webgl"] });
      const out = (await s.run({ [arg.onnxInput]: new ort.Tensor("float32", x, arg.shape) }))[arg.onnxOutput].data;
      await s.release();
      return out;
    },
  };
  return { sides, once: true, dispose: () => {} };
}

window.rows = {
  digits: (a) => classifier("./digits/", a, digitsLogits, 64),
  "digits-sgd": (a) => classifier("./digits/", { ...a, train: true }, digitsLogits, 64, () => tf.train.sgd(a.lr)),
  mlp: (a) => classifier("./mlp/", a, mlpLogits, 784),
  "mlp-sgd": (a) => classifier("./mlp/", { ...a, train: true }, mlpLogits, 784, () => tf.train.sgd(a.lr)),
  cnn: (a) => classifier("./cnn/", a, cnnLogits, 64),
  "cnn-adam": (a) => classifier("./cnn-adam/", { ...a, train: true }, cnnLogits, 64, () => tf.train.adam(a.lr, 0.9, 0.999, 1e-8)),
  matmul: async (a) => {
    const m = await load("./matmul/");
    const W = tf.variable(tf.tensor((await m.params()).W.data, [512, 512]));
    const x = rand(512 * 512, 5, -1, 1);
    return {
      sides: {
        dlc: async () => (await m.eval({ x: { data: x, shape: [512, 512] } }, ["y"])).y.data,
        tfjs: async () => { const t = tf.tensor2d(x, [512, 512]); const out = await tfRead(() => t.matMul(W)); t.dispose(); return out; },
      },
      model: m,
      dispose: () => { m.dispose(); W.dispose(); },
    };
  },
  squeezenet: (a) => imported("./squeezenet/", a),
  "small-cnn": (a) => imported("./small-cnn/", a),
  startup: (a) => startup("./squeezenet/", a),
};

window.bench = async (name, arg, { steps, warmup, repeats }) => {
  const row = await window.rows[name](arg);
  const names = Object.keys(row.sides);
  if (row.once) { steps = 1; warmup = 0; }
  const first = {};
  for (const s of names) first[s] = Array.from(await row.sides[s](row.steps ? 1 : 0));
  for (const s of names) for (let k = 0; k < warmup; k++) await row.sides[s](row.steps ? 1 : k);
  const runs = Object.fromEntries(names.map((s) => [s, []]));
  for (let r = 0; r < repeats; r++) {
    for (const s of names) {
      const t0 = performance.now();
      if (row.steps) await row.sides[s](steps);
      else for (let k = 0; k < steps; k++) await row.sides[s](k);
      runs[s].push((performance.now() - t0) / steps);
    }
  }
  row.dispose();
  const diffs = Object.fromEntries(names.slice(1).map((s) => [s, maxDiff(first.dlc, first[s])]));
  const losses = row.steps ? Object.fromEntries(names.map((s) => [s, first[s][0]])) : null;
  return { ms: Object.fromEntries(names.map((s) => [s, median(runs[s])])), runs, diffs, losses };
};
// --profile: one dlc.js step (after one untimed), each pass timed alone -> [{pass, ms, texels}]
window.profile = async (name, arg) => {
  const row = await window.rows[name](arg);
  if (!row.model) { row.dispose(); return null; }
  await row.sides.dlc(row.steps ? 1 : 0);
  row.model.device.timings = [];
  try {
    await row.sides.dlc(row.steps ? 1 : 0);
    return row.model.device.timings;
  } finally {
    row.model.device.timings = null;
    row.dispose();
  }
};
window.renderer = () => { const gl = document.createElement("canvas").getContext("webgl2"); if (!gl) return "no WebGL2"; const info = gl.getExtension("WEBGL_debug_renderer_info"); return gl.getParameter(gl.VERSION) + ", " + gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER); };
window.benchReady = true;
</script>"""  # noqa: E501


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    ap.add_argument("--digits-batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=5, help="timed steps a run (startup: 1)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="alternating timed runs per side; the median is shown")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing: each dlc.js row's passes, one step each timed alone (the GPU waited for "
        "before and after each), summed by program, largest first",
    )
    ap.add_argument(
        "--flags",
        default=" ".join(FLAGS),
        help="the browser's flags (default: WebGL2 on SwiftShader; on a GPU machine e.g. '--no-sandbox "
        "--use-angle=vulkan --enable-gpu')",
    )
    args = ap.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        sys.exit(f"unknown rows {unknown}: choose from {', '.join(ROWS)}")
    if not TFJS.exists():
        sys.exit(f"TensorFlow.js is missing at {TFJS}: see the top of {__file__} for how to get it")
    if any(r in ORT_ROWS for r in rows) and not (ORT / "ort.all.min.js").exists():
        sys.exit(f"onnxruntime-web is missing at {ORT}: see the top of {__file__} for how to get it")
    browser = next((p for p in BROWSERS if shutil.which(p)), None)
    if browser is None:
        sys.exit("no headless Chromium: apt-get install chromium-headless-shell")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit('playwright is missing: pip install "dlc[web]"')

    timing = {"steps": args.steps, "warmup": args.warmup, "repeats": args.repeats}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        onnx_models = _export_all(root, rows, args)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=browser, args=args.flags.split())
            page = b.new_page()
            page.on("pageerror", lambda e: print("page error:", e, file=sys.stderr))
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/bench.html")
            page.wait_for_function("window.benchReady === true")
            renderer = page.evaluate("window.renderer()")
            digits = _digits_arg(args)
            for row in rows:
                for name in ("digits", "digits-sgd") if row == "digits" else (row,):
                    arg = {"batch": 64 if name.startswith("cnn") else 128, "lr": args.lr}
                    if name.startswith("digits"):
                        arg = {**digits, "lr": args.lr}
                    if name in ORT_ROWS:
                        arg = onnx_models["squeezenet" if name == "startup" else name]
                    if args.profile:
                        _print_profile(name, page.evaluate("async ([n, a]) => await window.profile(n, a)", [name, arg]))
                        continue
                    r = page.evaluate("async ([n, a, t]) => await window.bench(n, a, t)", [name, arg, timing])
                    results.append((name, r))
                    print(name, r["ms"], file=sys.stderr)
                    if name == "startup":
                        phases = page.evaluate("window.phases")
            b.close()
        server.shutdown()
    print(f"browser: {browser} ({renderer}); {args.steps} steps x {args.repeats} runs, {args.warmup} warm-up")
    print("| row | dlc.js ms | other | other ms | other / dlc.js | max difference |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in results:
        d = r["ms"]["dlc"]
        for side, ms in r["ms"].items():
            if side != "dlc":
                print(f"| {name} | {d:.1f} | {side} | {ms:.1f} | {ms / d:.2f}x | {r['diffs'][side]:.1e} |")
    if "startup" in rows and not args.profile:
        _print_phases(phases)
    for name, r in results:
        if r["losses"]:
            print(f"{name}: first-step loss " + ", ".join(f"{s} {v:.7f}" for s, v in r["losses"].items()))
    return 0


def _print_phases(phases: list[dict]) -> None:
    """dlc.js's first calls, each phase's ms: until the last file arrived, then until the last
    shader compiled (the context made, the weights checked), the warm-up's draws, the rest of
    load, the first eval."""
    print("\nstartup, dlc.js's phases (ms; each first call's, in order):")
    print("| call | files | compile | warm-up | rest of load | first eval | first call |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, at in enumerate(phases):
        compiled = at.get("shaders", 0)
        ends = [at.get("files", 0), compiled, at.get("warm-up", compiled), at["load"], at["first"]]
        steps = [ends[0], *(b - a for a, b in zip(ends, ends[1:]))]
        print(f"| {i + 1} | " + " | ".join(f"{v:.0f}" for v in steps) + f" | {at['first']:.0f} |")


def _print_profile(name: str, passes: list | None, top: int = 12) -> None:
    """A row's passes summed by program (the shader file's name), the largest `top` first."""
    if passes is None:
        print(f"{name}: no dlc.js model to profile")
        return
    total = sum(p["ms"] for p in passes)
    by: dict[str, list] = {}
    for p in passes:
        entry = by.setdefault(p["pass"], [0, 0.0, p["texels"]])
        entry[0] += 1
        entry[1] += p["ms"]
    print(f"\n{name}: {len(passes)} passes, {total:.1f} ms in all (each alone)")
    print("| program | draws | ms | share | texels |")
    print("| --- | --- | --- | --- | --- |")
    for prog, (n, ms, texels) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {prog} | {n} | {ms:.1f} | {100 * ms / max(total, 1e-9):.0f}% | {texels} |")


def _export_all(root: pathlib.Path, rows: list[str], args) -> dict:
    """Write the page, the libraries and each row's export under `root`; returns the ONNX
    rows' arguments (input and output names on both sides, the input shape)."""
    import dlc
    from dlc.web import export_web

    (root / "bench.html").write_text(PAGE, encoding="utf-8")
    shutil.copy(TFJS, root / "tf.min.js")
    shutil.copy(HERE.parent / "dlc" / "web" / "static" / "dlc.js", root / "dlc.js")
    if (ORT / "ort.all.min.js").exists():
        (root / "ort").mkdir()
        for f in ORT.iterdir():
            if f.name.startswith("ort.all.min.js") or f.name.startswith("ort-wasm-simd-threaded."):
                shutil.copy(f, root / "ort" / f.name)

    def export(name, model, optimizer="sgd", lr=args.lr, weights=None):
        if weights is None:
            sess = dlc.Session(dlc.compile(model), backend="numpy", seed=0)
            weights = root / f"{name}.npz"
            np.savez(weights, **sess.params)
        export_web(model, root / name, weights=weights, optimizer=optimizer, lr=lr)

    samples = HERE.parent / "samples"
    wanted = set(rows)
    if "digits" in wanted:
        export("digits", samples / "mlp_digits.dl")
    if wanted & {"mlp", "mlp-sgd"}:
        (root / "mlp.dl").write_text(MLP, encoding="utf-8")
        export("mlp", root / "mlp.dl")
    if "matmul" in wanted:
        (root / "matmul.dl").write_text(MATMUL, encoding="utf-8")
        export("matmul", root / "matmul.dl", optimizer=None, lr=None)
    if "cnn" in wanted:
        export("cnn", samples / "cnn_digits.dl")
    if "cnn-adam" in wanted:
        export("cnn-adam", samples / "cnn_digits.dl", optimizer="adam", lr=0.01)
    onnx_models = {}
    for name in ("squeezenet", "small-cnn"):
        if name in wanted or (name == "squeezenet" and "startup" in wanted):
            onnx_models[name] = _export_onnx(root, name)
    return onnx_models


def _export_onnx(root: pathlib.Path, name: str) -> dict:
    import onnx

    import dlc
    from dlc.web import export_web

    if name == "squeezenet":
        model = _squeezenet()
    else:
        model = _small_cnn()
    imported = dlc.import_onnx(model, max_const_bytes=FOLD_BYTES)
    ((onnx_in, dl_in),) = imported.inputs.items()
    ((onnx_out, dl_out),) = imported.outputs.items()
    (root / f"{name}.dl").write_text(imported.source, encoding="utf-8")
    np.savez(root / f"{name}.npz", **imported.weights)
    export_web(root / f"{name}.dl", root / name, weights=root / f"{name}.npz")
    onnx.save(model, root / name / "model.onnx")
    shape = [int(d) for d in imported.model.inputs[dl_in]]
    return {"input": dl_in, "output": dl_out, "onnxInput": onnx_in, "onnxOutput": onnx_out, "shape": shape}


def _squeezenet():
    """The onnx wheel's SqueezeNet 1.1 with its ConstantOfShape weights (all 0.02) made seeded
    He-initialized initializers: onnxruntime-web's webgl backend has no ConstantOfShape, and
    real-looking weights keep the softmax from saturating."""
    import onnx
    from onnx import numpy_helper

    folder = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    model = onnx.load(folder / "light_squeezenet.onnx")
    g = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    rng = np.random.default_rng(0)
    keep = []
    for node in g.node:
        if node.op_type != "ConstantOfShape":
            keep.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 0
        value = rng.standard_normal(shape) * np.sqrt(2 / fan_in) if fan_in else np.full(shape, 0.01)
        g.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in g.node for i in n.input}
    inits = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)
    inputs = [i for i in g.input if i.name not in shapes]  # IR 3 listed the initializers too
    del g.input[:]
    g.input.extend(inputs)
    model.ir_version = 8  # IR 3 wants every initializer a graph input
    return model


def _small_cnn():
    """conv(3->16)-ReLU-pool, conv(16->32)-ReLU-pool, conv(32->64)-ReLU-global pool, Gemm(64->10),
    softmax on [1, 3, 64, 64], He-initialized with a fixed seed."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "image"
    for i, (cin, cout) in enumerate([(3, 16), (16, 32), (32, 64)]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (9 * cin))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(cout, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        pool = helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2])
        nodes.append(pool if i < 2 else helper.make_node("GlobalAveragePool", [f"r{i}"], [f"p{i}"]))
        x = f"p{i}"
    fc = (rng.standard_normal((64, 10)) / 8).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc"), numpy_helper.from_array(np.zeros(10, np.float32), "fcb")]
    nodes += [
        helper.make_node("Flatten", [x], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)  # ORT-web reads <= 13


def _digits_arg(args) -> dict:
    """The digits rows' batch and real rows of samples/data/digits_train.npz."""
    data = np.load(HERE.parent / "samples" / "data" / "digits_train.npz")
    n = args.digits_batch * 4
    idx = np.arange(n) % len(data["labels"])
    return {
        "batch": args.digits_batch,
        "pixels": data["pixels"][idx].ravel().tolist(),
        "labels": data["labels"][idx].astype(float).tolist(),
    }


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    sys.exit(main())
