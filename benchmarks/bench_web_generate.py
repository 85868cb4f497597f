"""Generation in the browser, with dlc.js's KV cache and without (not a test).

    # the browser: apt-get install chromium-headless-shell; pip install "dlc[web]"
    python benchmarks/bench_web_generate.py [--block 64] [--layers 2] [--heads 2] [--dims 64] \\
        [--tokens 100] [--repeats 3]

Exports samples/char_gpt.dl at the given size (params from their initializers, the corpus's
76 characters, `--block` the vocabulary's block and so the cache's rows) and opens its page
in headless Chromium (WebGL2 on SwiftShader unless the browser finds a GPU; flags as in
tests/web, the GPU program cache off). Each run generates `--tokens` characters after
"ROMEO:" (temperature 0.8, top-k 40) with `cache: true` and with `cache: false`, one after
the other, after an untimed run of each (the first draw of a program builds its code on
SwiftShader); a figure is the median of `--repeats` runs, in ms per generated character,
with the first token's time (the prefill) apart. Both sides must draw the same text.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import pathlib
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
FLAGS = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox", "--disable-gpu-program-cache"]
CORPUS = ROOT / "samples/data/shakespeare.txt"

RUN = """async ([cache, tokens]) => {
  const m = window.dlcPage.model;
  const times = [];
  let last = performance.now();
  const t0 = last;
  const text = await m.generateText("ROMEO:", { tokens, temperature: 0.8, topK: 40, seed: 0, cache,
    onToken: () => { const now = performance.now(); times.push(now - last); last = now; } });
  return { text, total: performance.now() - t0, first: times[0], stats: m.lastGeneration };
}"""


RENDERER = """(() => { const gl = window.dlcPage.model.device.gl;
  const info = gl.getExtension("WEBGL_debug_renderer_info");
  return gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER); })()"""


def small_source(block: int, layers: int, heads: int, dims: int) -> str:
    text = (ROOT / "samples/char_gpt.dl").read_text()
    for name, value in (("BLOCK", block), ("L", layers), ("H", heads), ("D", dims // heads), ("C", dims), ("P", 0.0)):
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    return text


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dims", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from dlc.text import TextData, vocab_path
    from dlc.web import export_web

    browser_path = next((p for p in BROWSERS if shutil.which(p)), None)
    if browser_path is None:
        sys.exit("no headless Chromium: apt-get install chromium-headless-shell")
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        model = root / "gpt.dl"
        model.write_text(small_source(args.block, args.layers, args.heads, args.dims))
        vocab = vocab_path(root / "gpt.npz")
        TextData(str(CORPUS), block=args.block).vocab.save(vocab)
        t0 = time.perf_counter()
        export_web(model, root / "web", vocab=vocab)
        print(f"export: {time.perf_counter() - t0:.1f} s")
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=browser_path, args=FLAGS)
                page = b.new_page()
                t0 = time.perf_counter()
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/web/index.html")
                ready = "window.dlcPage && (window.dlcPage.ready || window.dlcPage.error)"
                page.wait_for_function(ready, timeout=600_000)
                error = page.evaluate("window.dlcPage.error || null")
                if error:
                    sys.exit(f"the page failed to load: {error}")
                print(f"load: {time.perf_counter() - t0:.1f} s; {page.evaluate('navigator.userAgent')}")
                print(f"renderer: {page.evaluate(RENDERER)}")
                for cache in (True, False):  # untimed: the programs' first draws
                    first = page.evaluate(RUN, [cache, 3])
                    print(f"first run, cache {cache}: {first['total']:.0f} ms for 3 tokens")
                runs = {True: [], False: []}
                texts = set()
                for _ in range(args.repeats):
                    for cache in (True, False):
                        r = page.evaluate(RUN, [cache, args.tokens])
                        runs[cache].append(r)
                        texts.add(r["text"])
                b.close()
        finally:
            server.shutdown()
            server.server_close()
    if len(texts) != 1:
        print("the cached and uncached runs drew different texts:", texts)
        return 1
    size = f"block {args.block}, {args.layers} layers, {args.heads} heads, {args.dims} dims"
    print(f"\n{size}; {args.tokens} characters after 'ROMEO:', median of {args.repeats}\n")
    print("| dlc.js | ms / character | first character (ms) | total (ms) | runs (prefills, steps, windows) |")
    print("| --- | --- | --- | --- | --- |")
    for cache in (True, False):
        rs = runs[cache]
        total = statistics.median(r["total"] for r in rs)
        first = statistics.median(r["first"] for r in rs)
        s = rs[0]["stats"]
        label = "KV cache" if cache else "no cache (cache: false)"
        counts = f"{s['prefills']}, {s['steps']}, {s['windows']}"
        print(f"| {label} | {total / args.tokens:.2f} | {first:.1f} | {total:.0f} | {counts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
