// dlc.js: the runtime of a `dlc export --web` folder. An ES module with no dependencies and
// no build step: it loads manifest.json, shaders.json (the GLSL ES 3.00 shaders) and
// weights.bin, and runs the compiled programs on its own offscreen WebGL2 context.
//
//   import { load } from "./dlc.js";
//   const m = await load(".");                          // the folder holding manifest.json
//   const out = await m.eval({ pixels: { data, shape: [1, 64] } }, ["probs"]);
//   const losses = await m.train(feeds, { steps: 10, batchSize: 32 });
//   const params = await m.params();                    // name -> {data, shape}
//   const text = await m.generateText("ROMEO:", { tokens: 100, seed: 0 }); // a language model
//   m.dispose();
//
// It mirrors the Python texture executor (runtime/texture_executor.py, runtime/textures.py):
// every buffer is an R32F texture laid out row-major from the flat index; a kernel is one
// full-screen pass per output; a pass never renders into a texture it reads (it renders into
// a spare that takes the slot's place after the kernel). Reads are non-blocking: readPixels
// into a pixel-pack buffer, a fence, polling it between tasks, then the copy out; but a call
// whose GPU work measured under options.blockingReadMs the last time it ran (eval of one
// program, or a training step times the steps) reads with a plain readPixels, which waits for
// the GPU without returning to the event loop: a fence's status changes only between tasks,
// and the timers that poll it (clamped to 4 ms once nested) cost more than such a call's work.

const FORMAT = 1;
const LR = "$lr"; // the learning rate, an input of the train program
const PERSISTENT = new Set(["param", "state"]);
const OUTPUTS = "outputs"; // the program (and manifest key) of the model's outputs alone
const STEADY = new Set(["param", "state", "const"]); // slots no eval writes: packs of them are kept
const YIELD_EVERY = 32; // training steps queued between returns to the event loop (the page stays live)
const BLOCKING_READ_MS = 50; // options.blockingReadMs: a call whose GPU work took less reads blocking (a "long task" is one over 50 ms)
const ES_HEADER = "#version 300 es\nprecision highp float;\nprecision highp int;\nprecision highp sampler2D;\n";

// A triangle covering the viewport, from gl_VertexID alone (no attributes).
const VERTEX = `#version 300 es
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) << 2), float((gl_VertexID & 2) << 1)) - 1.0;
    gl_Position = vec4(p, 0.0, 1.0);
}
`;

// Copy dlc_count floats between textures of any layout.
const COPY = `${ES_HEADER}uniform sampler2D b0;
uniform int dlc_width;
uniform int dlc_count;
layout(location = 0) out float dlc_out;
void main() {
    int o = int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x);
    int w = textureSize(b0, 0).x;
    dlc_out = o < dlc_count ? texelFetch(b0, ivec2(o % w, o / w), 0).r : 0.0;
}
`;

// The same for a texture of 4 floats a texel (a param stored packed: Store), texel by texel
// (the two textures of one layout: packed params of one size).
const COPY4 = `${ES_HEADER}uniform sampler2D b0;
layout(location = 0) out vec4 dlc_out4;
void main() { dlc_out4 = texelFetch(b0, ivec2(gl_FragCoord.xy), 0); }
`;

// Element 0 of b0, rendered into the one texel the viewport covers (a step's loss into the
// texture collecting every step's loss: training reads them once, at the end).
const PICK = `${ES_HEADER}uniform sampler2D b0;
layout(location = 0) out float dlc_out;
void main() { dlc_out = texelFetch(b0, ivec2(0, 0), 0).r; }
`;

// texture_matmul.FOUR_TARGETS: defined (where MAX_DRAW_BUFFERS < 8), an 8-row products pass renders 4 rows a draw
const FOUR = "DLC_FOUR_TARGETS";
const FOUR_TARGETS = new RegExp(`^#ifndef ${FOUR}$`, "m");

// b<k>: unit k; a sampler2DArray reads the layers of an n-target pass's products (texture_matmul._quad)
const SAMPLER = /^uniform (?:highp )?sampler2D(Array)? b(\d+);/gm;

/** Every error dlc.js raises: a model, feed or browser problem, said in words. */
export class DlcError extends Error {
  constructor(message) {
    super(message);
    this.name = "DlcError";
  }
}

/** Load the export in folder `url` (e.g. "." or "models/digits/"); resolves to a Model.
 * options.canvas: a canvas (or OffscreenCanvas) whose WebGL2 context to use instead of one
 * of its own; options.onProgress({stage, done, total}): called as the files arrive (stage
 * "files": the weights, the shaders, a vocabulary), as the shaders compile (stage "shaders")
 * and as the first eval's programs are first drawn (stage "warm-up"); options.drawBuffers:
 * the render targets a draw may use, fewer than the context's (a test of the 4-target form
 * of the 8-row products passes); options.blockingReadMs (default 50; 0: never): an eval or
 * train call whose GPU work took less than this many ms the last time reads its results
 * with a blocking readPixels instead of polling a fence (faster for small calls; the page
 * waits that long without running its other tasks). */
export async function load(url = ".", options = {}) {
  if (options.drawBuffers !== undefined && !(Number.isInteger(options.drawBuffers) && options.drawBuffers >= 1)) {
    throw new DlcError(`drawBuffers must be a whole number >= 1, not ${show(options.drawBuffers)}`);
  }
  const blockMs = options.blockingReadMs === undefined ? BLOCKING_READ_MS : options.blockingReadMs;
  if (typeof blockMs !== "number" || !(blockMs >= 0)) {
    throw new DlcError(`blockingReadMs must be a number >= 0, not ${show(options.blockingReadMs)}`);
  }
  if (options.onProgress !== undefined && options.onProgress !== null && typeof options.onProgress !== "function") {
    throw new DlcError("onProgress must be a function ({stage, done, total}) => ...");
  }
  const base = new URL(url.endsWith("/") ? url : url + "/", globalThis.location ? globalThis.location.href : undefined);
  const where = `${base}manifest.json`;
  const manifest = await fetchOk(new URL("manifest.json", base)).then((r) =>
    r.json().catch((e) => {
      throw new DlcError(`${where} is not JSON: ${e.message}`);
    }),
  );
  if (!isObject(manifest) || manifest.format !== FORMAT || manifest.target !== "texture" || !isObject(manifest.web)) {
    throw new DlcError(`${where} is not a dlc web export of format ${FORMAT} (run dlc export MODEL --web DIR)`);
  }
  checkManifest(manifest, where);
  const web = manifest.web;
  const report = (stage, done, total) => options.onProgress && options.onProgress({ stage, done, total });
  // With an outputs program, eval's shaders (every named tensor) are compiled at the first
  // fetch of a name outside the outputs (and, in an export without shaders.json, fetched):
  // the first call of the outputs waits for neither.
  const lazy = has(manifest.programs, OUTPUTS) ? ["eval"] : [];
  const now = Object.keys(manifest.programs).filter((name) => !lazy.includes(name));
  const shaders = new URL(`${web.shaders}/`, base);
  // the files at once: the weights, every pass's shader from one file (shaders.json; an
  // export written before it had one fetches the shader files one request each), a vocabulary
  const files = { done: 0, total: 0 };
  const track = (promise) => {
    files.total++;
    return promise.then((x) => {
      report("files", ++files.done, files.total);
      return x;
    });
  };
  let sources = {};
  const pending = Promise.all([
    track(fetchOk(new URL(web.weights.file, base)).then((r) => r.arrayBuffer())),
    web.bundle ? track(loadBundle(manifest, base)) : fetchSources(now.map((name) => manifest.programs[name]), shaders, sources, track),
    web.vocab === undefined || web.vocab === null ? null : track(loadVocab(manifest, base, where)),
  ]);
  report("files", 0, files.total);
  const [weights, bundle, vocab] = await pending;
  const leaves = readLeaves(manifest, weights, where); // every refusal before any GL call
  if (web.bundle) sources = bundle.sources;
  const device = new Device(options.canvas, options.drawBuffers);
  device.blockMs = blockMs;
  if (web.bundle) device.ints = bundle.ints;
  try {
    // every program of the model at once (the driver may link them in parallel), and the
    // program the first eval runs drawn once: it then runs without building any (the outputs
    // program where the export has one, else eval; with a KV cache, its programs instead: what
    // generate runs).
    const entries = now.flatMap((name) => programEntries(manifest.programs[name], sources));
    const kv = kvCacheOf(manifest);
    const first = kv ? [kv.step, kv.window, kv.constants].filter((n) => n !== null) : [lazy.length ? OUTPUTS : "eval"];
    const warm = first.flatMap((n) => programEntries(manifest.programs[n], sources));
    await device.compileAll(entries, warm, options.onProgress || null);
  } catch (e) {
    device.dispose();
    throw e;
  }
  const model = new Model(device, manifest, sources, leaves);
  model.shaders = shaders; // where compiled() fetches a lazy program's shaders
  model.vocab = vocab || null; // null unless the export is a language model's with its vocabulary
  return model;
}

/** web.bundle's file (dlc/web/bundle.py), checked: -> {sources: file -> its program's text,
 * ints: file -> the Int32Array its program's dlc_k holds in its passes}. */
async function loadBundle(m, base) {
  const { file, bytes } = m.web.bundle;
  const raw = await fetchOk(new URL(file, base)).then((r) => r.arrayBuffer());
  if (raw.byteLength !== bytes) throw new DlcError(`${file} holds ${raw.byteLength} bytes; the manifest says ${bytes}`);
  let b;
  try {
    b = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
  } catch (e) {
    throw new DlcError(`${file} is not JSON: ${e.message}`);
  }
  return checkBundle(b, passFiles(m), file);
}

const BUNDLE_FORMAT = 1;
const MAX_LIFTED = 64; // dlc_k's length at most (bundle.py)
const MAX_BUNDLE_BYTES = 64 << 20;
const MAX_PROGRAM_CHARS = 1 << 20;
const K_LENGTH = /^uniform int dlc_k\[(\d+)\];$/gm;
const K_USE = /\bdlc_k\[(\d+)\]/g;

/** A shader bundle read as untrusted input, as bundle.py's check: {format, programs: [text],
 * passes: {file: [program, ints]}} naming every shader file of the manifest (`files`) and no
 * other, each program index in range, as many ints as the program's dlc_k, each a whole number
 * in [0, 2^31). */
function checkBundle(b, files, where) {
  const fail = failAt(where);
  if (!isObject(b) || b.format !== BUNDLE_FORMAT) throw new DlcError(`${where} is not a dlc shader bundle of format ${BUNDLE_FORMAT}`);
  if (!Array.isArray(b.programs) || !b.programs.length) fail("programs", "must be a list of shader texts");
  if (!isObject(b.passes)) fail("passes", "must be an object (shader file -> [program, ints])");
  const lengths = b.programs.map((text, i) => {
    if (typeof text !== "string" || !text) fail(`programs[${i}]`, "must be a shader's text");
    if (text.length > MAX_PROGRAM_CHARS) fail(`programs[${i}]`, `holds ${text.length} characters, more than the ${MAX_PROGRAM_CHARS} a shader may`);
    const declared = [...text.matchAll(K_LENGTH)];
    const n = declared.length ? Number(declared[0][1]) : 0;
    const reads = [...text.replace(K_LENGTH, "").matchAll(K_USE)].map((u) => Number(u[1]));
    if (declared.length > 1 || (declared.length && !(n > 0 && n <= MAX_LIFTED)) || reads.some((k) => k >= n)) {
      fail(`programs[${i}]`, `may declare dlc_k[n] once, 0 < n <= ${MAX_LIFTED}, and read its n elements alone`);
    }
    return n;
  });
  const missing = [...files].filter((f) => !has(b.passes, f)).sort();
  if (missing.length) fail("passes", `has no shader '${missing[0]}' (a pass of the manifest's programs)`);
  const sources = Object.create(null); // (a file named __proto__ is a key like any other)
  const ints = new Map();
  for (const [file, entry] of Object.entries(b.passes)) {
    const f = `passes.${file}`;
    if (!files.has(file)) fail(f, "is not a shader file of the manifest's programs");
    if (!Array.isArray(entry) || entry.length !== 2 || !Array.isArray(entry[1])) fail(f, "must be [program, ints]");
    const [index, values] = entry;
    if (!isCount(index) || index >= b.programs.length) fail(f, `program ${show(index)} is not an index of programs (0 to ${b.programs.length - 1})`);
    if (values.length !== lengths[index]) fail(f, `holds ${values.length} ints, but programs[${index}] reads ${lengths[index]}`);
    values.forEach((v, k) => {
      if (!isCount(v) || v > 2147483647) fail(f, `int ${k} is ${show(v)}, not a whole number from 0 to 2147483647`);
    });
    sources[file] = b.programs[index];
    if (values.length) ints.set(file, Int32Array.from(values));
  }
  return { sources, ints };
}

/** Every shader file the manifest's programs name. */
function passFiles(m) {
  const files = new Set();
  for (const p of Object.values(m.programs)) for (const k of p.kernels) for (const q of k.passes) files.add(q.file);
  return files;
}

/** Fetch into `sources` (file -> text) the shader files of `programs` it does not hold yet
 * (each request's promise through `track`, where given). */
async function fetchSources(programs, folder, sources, track = (p) => p) {
  const files = new Set();
  for (const program of programs) for (const k of program.kernels) for (const p of k.passes) if (!has(sources, p.file)) files.add(p.file);
  await Promise.all(
    [...files].map(async (file) => {
      sources[file] = await track(fetchOk(new URL(file, folder)).then((r) => r.text()));
    }),
  );
}

/** [source, file] of every pass of a program spec. */
function programEntries(program, sources) {
  return program.kernels.flatMap((k) => k.passes.map((p) => [sources[p.file], p.file]));
}

/** A shader's text without its // comments: what the GPU runs (the program's key). */
function codeOf(source) {
  return source.replace(/\/\/[^\n]*/g, "");
}

async function fetchOk(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new DlcError(`cannot load ${url}: ${e.message}`);
  }
  if (!response.ok) throw new DlcError(`cannot load ${url}: HTTP ${response.status}`);
  return response;
}

// -- the manifest and weights.bin, checked before use -------------------------------------
// Both are read as untrusted input (an edited or truncated export): every field dlc.js uses is
// checked here, and a problem is a DlcError naming the field or leaf, never a TypeError or a
// RangeError deep inside eval, nor weights that load wrong (a missing leaf, NaN).

// Own keys only: a name like 'constructor' or 'toString' is no key of a plain object.
const has = (object, key) => Object.prototype.hasOwnProperty.call(object, key);
const isObject = (x) => typeof x === "object" && x !== null && !Array.isArray(x);
const isCount = (x) => Number.isInteger(x) && x >= 0;
const FILE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/; // as runtime/manifest.py: no folders, no URLs
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** Throw a DlcError `where: field: problem`. */
function failAt(where) {
  return (field, problem) => {
    throw new DlcError(`${where}: ${field}: ${problem}`);
  };
}

const show = (x) => {
  const text = JSON.stringify(x);
  return text === undefined ? String(x) : text.length > 60 ? `${text.slice(0, 57)}...` : text;
};

/** A shape: a list of whole numbers (and, where `symbolic`, dim names). */
function checkShape(shape, field, fail, symbolic = true) {
  if (!Array.isArray(shape)) fail(field, `must be a shape (a list of dims), not ${show(shape)}`);
  shape.forEach((d, i) => {
    if (!(isCount(d) || (symbolic && typeof d === "string" && d.length))) {
      fail(`${field}[${i}]`, `${show(d)} is not ${symbolic ? "a whole number or a dim name" : "a whole number"}`);
    }
  });
  return shape;
}

function checkFileName(name, field, fail) {
  if (typeof name !== "string" || name.length > 200 || !FILE_NAME.test(name) || name.includes("..")) {
    fail(field, `${show(name)} is not a plain file name in the export's folder`);
  }
}

/** The manifest's fields that dlc.js reads, checked for type and consistency. */
function checkManifest(m, where) {
  const fail = failAt(where);
  if (typeof m.model !== "string") fail("model", `must be the model's file name, not ${show(m.model)}`);
  for (const key of ["inputs", "params", "tensors", "names", "programs"]) {
    if (!isObject(m[key])) fail(key, `must be an object, not ${show(m[key])}`);
  }
  for (const [n, shape] of Object.entries(m.inputs)) checkShape(shape, `inputs.${n}`, fail);
  for (const [n, shape] of Object.entries(m.params)) checkShape(shape, `params.${n}`, fail, false);
  for (const [n, shape] of Object.entries(m.tensors)) checkShape(shape, `tensors.${n}`, fail);
  if (!Array.isArray(m.losses) || m.losses.some((n) => typeof n !== "string")) fail("losses", "must be a list of names");
  if (!isObject(m.programs.eval)) fail("programs.eval", "is missing");
  if (has(m, OUTPUTS) !== has(m.programs, OUTPUTS)) fail(OUTPUTS, `is there exactly when programs.${OUTPUTS} is`);
  if (m.train !== null && m.train !== undefined) {
    if (!isObject(m.train) || !isObject(m.train.optimizer) || !isObject(m.train.states)) {
      fail("train", "must be null or {loss, optimizer, states}");
    }
    if (!Number.isFinite(m.train.optimizer.lr)) fail("train.optimizer.lr", `must be a finite number, not ${show(m.train.optimizer.lr)}`);
    for (const [n, shape] of Object.entries(m.train.states)) checkShape(shape, `train.states.${n}`, fail, false);
    if (!isObject(m.programs.train)) fail("programs.train", "is missing (the manifest has a training setup)");
  }
  checkKvCache(m, fail); // (its programs' inputs and states: before checkProgram reads them)
  for (const [name, p] of Object.entries(m.programs)) checkProgram(m, name, p, fail);
  const evalTensors = m.programs.eval.tensors;
  for (const [n, t] of Object.entries(m.names)) {
    if (!isCount(t) || !isObject(evalTensors[t])) fail(`names.${n}`, `${show(t)} is not a tensor of programs.eval`);
  }
  if (has(m, OUTPUTS)) checkOutputs(m, fail);
  const web = m.web;
  checkFileName(web.shaders, "web.shaders", fail);
  if (!isObject(web.weights) || !isObject(web.weights.leaves)) fail("web.weights", "must be {file, bytes, leaves}");
  checkFileName(web.weights.file, "web.weights.file", fail);
  if (web.bundle !== undefined && web.bundle !== null) {
    if (!isObject(web.bundle)) fail("web.bundle", `must be {file, bytes}, not ${show(web.bundle)}`);
    checkFileName(web.bundle.file, "web.bundle.file", fail);
    if (!isCount(web.bundle.bytes) || web.bundle.bytes > MAX_BUNDLE_BYTES) {
      fail("web.bundle.bytes", `must be a whole number up to ${MAX_BUNDLE_BYTES} (a shader bundle's most), not ${show(web.bundle.bytes)}`);
    }
  }
  if (!isCount(web.weights.bytes)) fail("web.weights.bytes", `must be a whole number, not ${show(web.weights.bytes)}`);
  if (web.packed !== undefined && web.packed !== null) {
    // the params stored 4 values a texel (their shaders read and write them so)
    if (!Array.isArray(web.packed)) fail("web.packed", `must be a list of param names, not ${show(web.packed)}`);
    for (const n of web.packed) {
      if (typeof n !== "string" || !has(m.params, n)) fail("web.packed", `${show(n)} is not a param of the model`);
      if (product(m.params[n].map(Number)) % 4 !== 0) fail("web.packed", `param '${n}' ${showShape(m.params[n])} is no whole number of texels of 4`);
    }
    if (new Set(web.packed).size !== web.packed.length) fail("web.packed", "names a param twice");
  }
}

/** The manifest's `outputs` (with programs.outputs): the names the outputs program fetches (the
 * model's outputs alone, fused across the names between them), each read there as tensor
 * names[n]: a root of that program (stored, its slot never reused before the read), of the
 * eval program's shape. */
function checkOutputs(m, fail) {
  const outputs = m[OUTPUTS];
  if (!Array.isArray(outputs) || !outputs.length) fail(OUTPUTS, `must be a list of names, not ${show(outputs)}`);
  const p = m.programs[OUTPUTS];
  outputs.forEach((n, i) => {
    const f = `${OUTPUTS}[${i}]`;
    if (typeof n !== "string" || !has(m.names, n)) fail(f, `${show(n)} is not a name in 'names'`);
    if (outputs.indexOf(n) !== i) fail(f, `'${n}' appears twice`);
    const t = m.names[n];
    if (!p.roots.includes(t)) fail(f, `tensor ${t} ('${n}') is not a root of programs.${OUTPUTS}`);
    const [a, b] = [p.tensors[t].shape, m.programs.eval.tensors[t].shape];
    if (a.length !== b.length || a.some((d, j) => d !== b[j])) fail(f, `tensor ${t} has shape ${show(a)} there but ${show(b)} in the eval program`);
  });
}

/** The manifest's `web.kv_cache` (dlc/web/export.py): null (no language model with its block),
 * {refused: why} (its logits are not incremental), or the key/value cache's programs: `step`
 * (new ids at positions [pos, pos + n) over the caches, which it writes), `window` (a whole
 * window from position 0, no cache) and `constants` (null, or the weights read transposed,
 * once a generation), the input `position` (pos, i32 [1]), and the shapes of the `caches`
 * and `hoisted` states (textures of the runtime's, not of weights.bin). */
function checkKvCache(m, fail) {
  const kv = m.web.kv_cache;
  if (kv === undefined || kv === null) return;
  if (!isObject(kv)) fail("web.kv_cache", `must be null or an object, not ${show(kv)}`);
  if (has(kv, "refused")) {
    if (typeof kv.refused !== "string") fail("web.kv_cache.refused", "must be a string (why the model has no cache)");
    return;
  }
  if (!Number.isInteger(kv.block) || kv.block < 1) fail("web.kv_cache.block", `must be a whole number >= 1, not ${show(kv.block)}`);
  for (const key of ["step", "window", "constants"]) {
    if (key === "constants" && kv[key] === null) continue;
    if (typeof kv[key] !== "string" || !has(m.programs, kv[key]) || ["eval", OUTPUTS, "train"].includes(kv[key])) {
      fail(`web.kv_cache.${key}`, `${show(kv[key])} is not a program of the export (its programs: ${Object.keys(m.programs).join(", ")})`);
    }
  }
  if (typeof kv.position !== "string" || has(m.inputs, kv.position)) fail("web.kv_cache.position", `${show(kv.position)} is not an input name of its own`);
  for (const key of ["caches", "hoisted"]) {
    if (!isObject(kv[key])) fail(`web.kv_cache.${key}`, `must be an object (state name -> shape), not ${show(kv[key])}`);
    for (const [n, shape] of Object.entries(kv[key])) {
      checkShape(shape, `web.kv_cache.${key}.${n}`, fail);
      if (storedLeaves(m).has(n)) fail(`web.kv_cache.${key}.${n}`, "is a param or optimizer state of the model");
    }
  }
  for (const key of ["step", "window"]) {
    const p = m.programs[kv[key]];
    if (!isObject(p) || !Array.isArray(p.roots) || p.roots.length !== 1) fail(`programs.${kv[key]}.roots`, "must be one tensor: the last position's logits");
  }
}

/** web.kv_cache when the export has the cache's programs (null when not, or refused). */
function kvCacheOf(m) {
  const kv = m.web && m.web.kv_cache;
  return isObject(kv) && !has(kv, "refused") ? kv : null;
}

/** A program spec (runtime/spec.py ProgramSpec.to_json): the fields the Executor reads, each
 * of its type, and every slot, tensor, kernel, leaf, input and dim it names one that exists. */
function checkProgram(m, name, p, fail) {
  const f = `programs.${name}`;
  if (!isObject(p)) fail(f, "must be a program {slots, tensors, producer, kernels, ...}");
  const list = (x, field) => (Array.isArray(x) ? x : fail(field, `must be a list, not ${show(x)}`));
  const object = (x, field) => (isObject(x) ? x : fail(field, `must be an object, not ${show(x)}`));
  const index = (x, n, field, what) => {
    if (!isCount(x) || x >= n) fail(field, `${show(x)} is not ${what} (0 to ${n - 1})`);
    return x;
  };
  const kv = kvCacheOf(m);
  const leaves = storedLeaves(m);
  if (kv) for (const [n, shape] of [...Object.entries(kv.caches), ...Object.entries(kv.hoisted)]) leaves.set(n, [shape, "cache"]);
  const inputs = new Set(Object.keys(m.inputs));
  if (name === "train") inputs.add(LR);
  if (kv && [kv.step, kv.window, kv.constants].includes(name)) inputs.add(kv.position);
  // The symbols the inputs bind (a product dim of an input, `B*T`, binds each factor).
  const dims = new Set(
    Object.values(m.inputs).flatMap((shape) =>
      shape.filter((d) => typeof d === "string").flatMap((d) => d.split("*").filter((f) => !/^[0-9]+$/.test(f))),
    ),
  );
  // A dim is one of them, or a product of them and integers (`B*T`, `3*B`: runtime/dims.py).
  const dim = (d, field) =>
    typeof d === "string" && d.split("*").every((f) => dims.has(f) || /^[0-9]+$/.test(f))
      ? d
      : fail(field, `${show(d)} is not a dim of the model's inputs`);
  const size = (z, field) => {
    if (!Array.isArray(z) || !z.length || !isCount(z[0])) fail(field, `must be a size [count, dims...], not ${show(z)}`);
    z.slice(1).forEach((d, i) => dim(d, `${field}[${i + 1}]`));
  };
  const slots = list(p.slots, `${f}.slots`);
  slots.forEach((slot, i) => {
    const g = `${f}.slots[${i}]`;
    object(slot, g);
    if (PERSISTENT.has(slot.kind)) {
      if (!leaves.has(slot.name)) fail(`${g}.name`, `${show(slot.name)} is not a param or optimizer state of the model`);
    } else if (slot.kind === "input" || slot.kind === "temp") {
      if (slot.kind === "input" && !inputs.has(slot.name)) fail(`${g}.name`, `${show(slot.name)} is not an input of the model`);
      const sizes = list(slot.sizes, `${g}.sizes`);
      if (!sizes.length) fail(`${g}.sizes`, "is empty");
      sizes.forEach((z, j) => size(z, `${g}.sizes[${j}]`));
    } else if (slot.kind === "const") {
      if (![slot.values].flat(Infinity).every((v) => typeof v === "number")) fail(`${g}.values`, "must be numbers");
    } else fail(`${g}.kind`, `${show(slot.kind)} is not a slot kind (param, state, input, temp, const)`);
  });
  const tensors = object(p.tensors, `${f}.tensors`);
  for (const [t, info] of Object.entries(tensors)) {
    const g = `${f}.tensors.${t}`;
    if (!/^(0|[1-9][0-9]{0,9})$/.test(t)) fail(`${f}.tensors`, `the key ${show(t)} is not a tensor id`);
    object(info, g);
    index(info.slot, slots.length, `${g}.slot`, "a slot of the program");
    checkShape(info.shape, `${g}.shape`, fail).forEach((d, i) => typeof d === "string" && dim(d, `${g}.shape[${i}]`));
    if (typeof info.label !== "string") fail(`${g}.label`, "must be a string");
  }
  const tensor = (t, field) => (isCount(t) && isObject(tensors[t]) ? t : fail(field, `${show(t)} is not a tensor of ${f}`));
  list(p.roots, `${f}.roots`).forEach((t, i) => tensor(t, `${f}.roots[${i}]`));
  if (name === "train" && !p.roots.length) fail(`${f}.roots`, "is empty: the training step has no loss");
  const kernels = list(p.kernels, `${f}.kernels`);
  kernels.forEach((k, i) => {
    const g = `${f}.kernels[${i}]`;
    object(k, g);
    if (typeof k.name !== "string") fail(`${g}.name`, "must be a string");
    list(k.slots, `${g}.slots`).forEach((s, j) => index(s, slots.length, `${g}.slots[${j}]`, "a slot of the program"));
    for (const key of ["reads", "writes"]) list(k[key], `${g}.${key}`).forEach((t, j) => tensor(t, `${g}.${key}[${j}]`));
    for (const [u, d] of Object.entries(object(k.uniforms, `${g}.uniforms`))) dim(d, `${g}.uniforms.${u}`);
    list(k.after, `${g}.after`).forEach((a, j) => index(a, i, `${g}.after[${j}]`, "an earlier kernel"));
    list(k.inputs, `${g}.inputs`).forEach((n, j) => inputs.has(n) || fail(`${g}.inputs[${j}]`, `${show(n)} is not an input of the model`));
    if (k.scalars !== undefined && k.scalars !== null) object(k.scalars, `${g}.scalars`);
    if (k.scratch !== undefined && k.scratch !== null) {
      object(k.scratch, `${g}.scratch`);
      index(k.scratch.unit, 1 << 16, `${g}.scratch.unit`, "a texture unit");
      size(k.scratch.size, `${g}.scratch.size`);
    }
    const packed = new Set();
    list(k.packed || [], `${g}.packed`).forEach((q, j) => {
      object(q, `${g}.packed[${j}]`);
      packed.add(index(q.unit, 1 << 16, `${g}.packed[${j}].unit`, "a texture unit"));
      size(q.rows, `${g}.packed[${j}].rows`);
      size(q.depth, `${g}.packed[${j}].depth`);
    });
    if (!list(k.passes, `${g}.passes`).length) fail(`${g}.passes`, "is empty");
    k.passes.forEach((pass, j) => {
      const h = `${g}.passes[${j}]`;
      object(pass, h);
      checkFileName(pass.file, `${h}.file`, fail);
      if (pass.into !== undefined && pass.into !== null) {
        if (!packed.has(pass.into)) fail(`${h}.into`, `${show(pass.into)} is not a packed unit of the kernel`);
      } else if (pass.tensor === null) {
        if (!k.scratch) fail(`${h}.tensor`, "is null, but the kernel has no scratch texture to render into");
      } else tensor(pass.tensor, `${h}.tensor`);
    });
  });
  for (const [t, k] of Object.entries(object(p.producer, `${f}.producer`))) {
    if (!/^(0|[1-9][0-9]{0,9})$/.test(t) || !isObject(tensors[t])) fail(`${f}.producer`, `the key ${show(t)} is not a tensor of ${f}`);
    index(k, kernels.length, `${f}.producer.${t}`, "a kernel of the program");
  }
  list(p.copies, `${f}.copies`).forEach((c, i) => {
    object(c, `${f}.copies[${i}]`);
    if (!leaves.has(c.target)) fail(`${f}.copies[${i}].target`, `${show(c.target)} is not a param or optimizer state`);
    tensor(c.tensor, `${f}.copies[${i}].tensor`);
  });
}

/** name -> [shape, what] of every leaf weights.bin must hold: the params, then the optimizer state. */
function storedLeaves(m) {
  const leaves = new Map();
  for (const [n, shape] of Object.entries(m.params)) leaves.set(n, [shape, "param"]);
  for (const [n, shape] of Object.entries(m.train ? m.train.states : {})) leaves.set(n, [shape, "optimizer state"]);
  return leaves;
}

/** Each leaf's values (name -> Float32Array), checked against the manifest: every param and
 * optimizer state has one, of its shape, with a whole float32 offset and its count inside the
 * file, overlapping no other, and finite values. */
function readLeaves(m, weights, where) {
  const fail = failAt(where);
  const file = m.web.weights.file;
  const bytes = weights.byteLength;
  if (bytes !== m.web.weights.bytes) {
    throw new DlcError(`${file} holds ${bytes} bytes; the manifest says ${m.web.weights.bytes}`);
  }
  const leaves = m.web.weights.leaves;
  const want = storedLeaves(m);
  for (const name of Object.keys(leaves)) {
    if (!want.has(name)) fail(`web.weights.leaves`, `leaf '${name}' is not a param or optimizer state of the model`);
  }
  const spans = [];
  const values = new Map();
  for (const [name, [shape, what]] of want) {
    const leaf = has(leaves, name) ? leaves[name] : undefined;
    const f = `web.weights.leaves.${name}`;
    if (leaf === undefined) fail("web.weights.leaves", `no leaf for ${what} '${name}' ${showShape(shape)}: ${file} does not hold it`);
    if (!isObject(leaf)) fail(f, `leaf '${name}' must be {offset, count, shape}, not ${show(leaf)}`);
    const { offset, count } = leaf;
    checkShape(leaf.shape, `${f}.shape`, fail, false);
    if (leaf.shape.length !== shape.length || leaf.shape.some((d, i) => d !== shape[i])) {
      fail(`${f}.shape`, `leaf '${name}' has shape ${showShape(leaf.shape)}, but ${what} '${name}' is ${showShape(shape)}`);
    }
    if (!isCount(count) || count !== product(shape)) {
      fail(`${f}.count`, `leaf '${name}' has count ${show(count)}, but its shape ${showShape(shape)} holds ${product(shape)} floats`);
    }
    if (!isCount(offset) || offset % 4) fail(`${f}.offset`, `leaf '${name}' has offset ${show(offset)}, not a whole multiple of 4 bytes`);
    if (offset + 4 * count > bytes) {
      fail(f, `leaf '${name}' spans bytes ${offset} to ${offset + 4 * count} of ${file}, which holds ${bytes}`);
    }
    if (count) spans.push([offset, offset + 4 * count, name]);
    values.set(name, leafValues(weights, offset, count));
  }
  spans.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < spans.length; i++) {
    const [[s0, e0, a], [s1, e1, b]] = [spans[i - 1], spans[i]];
    if (s1 < e0) fail("web.weights.leaves", `leaves '${a}' (bytes ${s0} to ${e0}) and '${b}' (bytes ${s1} to ${e1}) overlap in ${file}`);
  }
  for (const [name, data] of values) {
    const bad = data.findIndex((v) => !Number.isFinite(v));
    if (bad >= 0) {
      const at = leaves[name].offset + 4 * bad;
      throw new DlcError(`${file}: leaf '${name}' holds ${data[bad]} at index ${bad} (byte ${at}): weights must be finite`);
    }
  }
  return values;
}

/** `count` little-endian float32s at byte `offset` (a view where the platform is little-endian). */
function leafValues(weights, offset, count) {
  if (LITTLE_ENDIAN) return new Float32Array(weights, offset, count);
  const view = new DataView(weights, offset, 4 * count);
  return Float32Array.from({ length: count }, (_, i) => view.getFloat32(4 * i, true));
}

// -- the GL side: a context, textures, programs, passes, reads ----------------------------

/** One WebGL2 context and what runs on it: float textures, programs, the pass helpers. */
class Device {
  constructor(canvas, drawBuffers = Infinity) {
    if (!canvas) {
      canvas = typeof OffscreenCanvas !== "undefined" ? new OffscreenCanvas(1, 1) : document.createElement("canvas");
    }
    const gl = canvas.getContext("webgl2", { alpha: false, antialias: false, depth: false, stencil: false });
    if (!gl) throw new DlcError("this browser gives no WebGL2 context; dlc needs WebGL2");
    if (!gl.getExtension("EXT_color_buffer_float")) {
      throw new DlcError("this browser's WebGL2 lacks EXT_color_buffer_float: dlc renders into float textures");
    }
    this.gl = gl;
    this.maxSize = gl.getParameter(gl.MAX_TEXTURE_SIZE);
    this.maxUnits = gl.getParameter(gl.MAX_TEXTURE_IMAGE_UNITS);
    // render targets a draw may write: WebGL2 promises 4; an 8-row products pass
    // (texture_matmul._quad) with fewer runs as two draws of 4 rows (FOUR_TARGETS)
    this.maxDrawBuffers = Math.min(gl.getParameter(gl.MAX_DRAW_BUFFERS), drawBuffers);
    this.vao = gl.createVertexArray();
    this.vertex = this.shader(gl.VERTEX_SHADER, VERTEX, "dlc_vertex");
    this.textures = new Set();
    this.programs = new Map(); // source -> program
    this.ints = new Map(); // shader file -> the dlc_k its pass sets (a bundle's shared programs)
    this.copyProgram = this.program(COPY, "dlc_copy");
    this.copy4Program = this.program(COPY4, "dlc_copy4");
    this.pickProgram = this.program(PICK, "dlc_pick");
    this.readFormat = null; // [format, channels] readPixels takes for an R32F framebuffer
    this.timings = null; // Model.profile: each pass's time
    this.blockMs = BLOCKING_READ_MS; // reads of a call whose GPU work took less block (readTimed)
    this.waits = new Map(); // a call's key -> the ms its GPU work took the last time, per unit
    this.blocked = 0; // blocking reads so far (for tests)
  }

  /** (width, height) holding `count` floats: near square (a one-row texture wastes half of
   * every 2x2 quad the rasterizer shades; shaders index it flat, by its width). */
  /** [width, height] of a packed texture (runtime/textures.py packed_layout): `rows` rows of
   * ceil(depth / 4) texels, one row down each column, in bands as wide as the context allows. */
  packedLayout(rows, depth, what) {
    const width = Math.max(Math.min(rows, this.maxSize), 1);
    const quads = Math.max(Math.ceil(depth / 4), 1);
    const bands = Math.max(Math.ceil(rows / width), 1);
    if (bands * quads > this.maxSize) {
      throw new DlcError(`${what} needs ${bands} bands of ${quads} texels, more than a ${this.maxSize}x${this.maxSize} texture holds (MAX_TEXTURE_SIZE)`);
    }
    return [width, bands * quads];
  }

  layout(count, what) {
    count = Math.max(count, 1);
    const width = Math.min(Math.ceil(Math.sqrt(count)), this.maxSize);
    const height = Math.ceil(count / width);
    if (height > this.maxSize) {
      throw new DlcError(
        `${what} needs ${count} floats, more than a ${this.maxSize}x${this.maxSize} texture holds (MAX_TEXTURE_SIZE)`,
      );
    }
    return [width, height];
  }

  /** An R32F texture of at least `count` floats, with its framebuffer; `size` [width, height]:
   * an RGBA32F one of that size (a packed texture of texture_matmul.py); `layers` > 0: an
   * RGBA32F array texture of that many layers of `size` (no framebuffer of its own: the render
   * targets of one pass, framebufferOf). */
  texture(count, what = "a tensor", size = null, layers = 0) {
    const gl = this.gl;
    const [width, height] = size || this.layout(count, what);
    const handle = gl.createTexture();
    if (layers) {
      gl.bindTexture(gl.TEXTURE_2D_ARRAY, handle);
      gl.texParameteri(gl.TEXTURE_2D_ARRAY, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
      gl.texParameteri(gl.TEXTURE_2D_ARRAY, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
      gl.texStorage3D(gl.TEXTURE_2D_ARRAY, 1, gl.RGBA32F, width, height, layers);
      const tex = { handle, fbo: null, width, height, layers, count: width * height * layers };
      this.textures.add(tex);
      return tex;
    }
    gl.bindTexture(gl.TEXTURE_2D, handle);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
    gl.texStorage2D(gl.TEXTURE_2D, 1, size ? gl.RGBA32F : gl.R32F, width, height);
    const fbo = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, handle, 0);
    const status = gl.checkFramebufferStatus(gl.FRAMEBUFFER);
    if (status !== gl.FRAMEBUFFER_COMPLETE) {
      const kind = size ? "RGBA32F" : "R32F";
      throw new DlcError(`this WebGL2 cannot render into ${kind} textures (framebuffer status 0x${status.toString(16)})`);
    }
    const tex = { handle, fbo, width, height, count: width * height };
    this.textures.add(tex);
    return tex;
  }

  /** An RGBA32F texture holding `count` floats 4 a texel, row-major from the flat index (float
   * i in component i % 4 of texel i / 4; near square): a param stored packed
   * (manifest.web.packed; its update renders 4 values a fragment, texture_matmul._unpack4_pass). */
  flat4Texture(count, what = "a tensor") {
    const [width, height] = this.layout(Math.ceil(Math.max(count, 1) / 4), what);
    const tex = this.texture(width * height, what, [width, height]);
    tex.flat4 = true;
    tex.floats = 4 * width * height;
    return tex;
  }

  deleteTexture(tex) {
    if (!tex || !this.textures.has(tex)) return;
    if (tex.multi) for (const fbo of tex.multi.values()) this.gl.deleteFramebuffer(fbo);
    if (tex.fbo) this.gl.deleteFramebuffer(tex.fbo);
    this.gl.deleteTexture(tex.handle);
    this.textures.delete(tex);
  }

  /** Write `data` (a Float32Array) at the start of `tex`: whole rows, then the last partial row. */
  upload(tex, data) {
    const gl = this.gl;
    if (data.length > (tex.flat4 ? tex.floats : tex.count)) throw new DlcError(`internal dlc error: ${data.length} floats into a texture of ${tex.count}`);
    tex.version = (tex.version || 0) + 1; // what it holds changed (a kept pack of it is stale)
    gl.bindTexture(gl.TEXTURE_2D, tex.handle);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 4);
    if (tex.flat4) {
      if (data.length > tex.floats) throw new DlcError(`internal dlc error: ${data.length} floats into a texture of ${tex.floats}`);
      const texels = Math.ceil(data.length / 4);
      let padded = data;
      if (data.length !== 4 * texels) {
        padded = new Float32Array(4 * texels);
        padded.set(data);
      }
      const full = Math.floor(texels / tex.width);
      if (full > 0) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, tex.width, full, gl.RGBA, gl.FLOAT, padded, 0);
      const left = texels - full * tex.width;
      if (left > 0) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, full, left, 1, gl.RGBA, gl.FLOAT, padded, 4 * full * tex.width);
      return;
    }
    const rows = Math.floor(data.length / tex.width);
    if (rows > 0) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, tex.width, rows, gl.RED, gl.FLOAT, data, 0);
    const rest = data.length - rows * tex.width;
    if (rest > 0) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, rows, rest, 1, gl.RED, gl.FLOAT, data, rows * tex.width);
  }

  shader(kind, source, name) {
    const gl = this.gl;
    const shader = gl.createShader(kind);
    gl.shaderSource(shader, source);
    gl.compileShader(shader);
    if (!gl.getShaderParameter(shader, gl.COMPILE_STATUS)) {
      const log = gl.getShaderInfoLog(shader);
      gl.deleteShader(shader);
      const numbered = source
        .split("\n")
        .map((line, i) => `${String(i + 1).padStart(4)}  ${line}`)
        .join("\n");
      throw new DlcError(`internal dlc error: the shader '${name}' does not compile:\n${log}\n${numbered}`);
    }
    return shader;
  }

  /** A linked full-screen-triangle program around one fragment shader; sampler b<k> reads unit k.
   * One program a source text without its comments (which name the kernel and its tensors):
   * kernels (and the eval and train programs) whose passes are the same code share it. */
  program(source, name) {
    const code = codeOf(source);
    const program = this.programs.get(code) || this.finishProgram(this.startProgram(code, name));
    // a bundle's shared program: pass `name` sets its own dlc_k (the view shares the rest)
    const ints = this.ints.get(name);
    return ints ? Object.assign(Object.create(program), { name, ints }) : program;
  }

  /** Compile and link without asking how it went (the driver may work on it in the background). */
  startProgram(source, name) {
    const gl = this.gl;
    const frag = gl.createShader(gl.FRAGMENT_SHADER);
    // an 8-row products pass where the context draws into fewer than 8 buffers: its 4-row form
    const four = FOUR_TARGETS.test(source) && this.maxDrawBuffers < 8;
    gl.shaderSource(frag, four ? source.replace("\n", `\n#define ${FOUR}\n`) : source);
    gl.compileShader(frag);
    const handle = gl.createProgram();
    gl.attachShader(handle, this.vertex);
    gl.attachShader(handle, frag);
    gl.linkProgram(handle);
    return { handle, frag, source, name, four };
  }

  /** A started program checked (a compile or link error is a DlcError with the numbered
   * source), its samplers set to their units and its uniforms looked up once. */
  finishProgram({ handle, frag, source, name, four }) {
    const gl = this.gl;
    if (!gl.getProgramParameter(handle, gl.LINK_STATUS)) {
      const compiled = gl.getShaderParameter(frag, gl.COMPILE_STATUS);
      const log = compiled ? gl.getProgramInfoLog(handle) : gl.getShaderInfoLog(frag);
      gl.deleteShader(frag);
      gl.deleteProgram(handle);
      if (compiled) throw new DlcError(`internal dlc error: the shader '${name}' does not link: ${log}`);
      const numbered = source
        .split("\n")
        .map((line, i) => `${String(i + 1).padStart(4)}  ${line}`)
        .join("\n");
      throw new DlcError(`internal dlc error: the shader '${name}' does not compile:\n${log}\n${numbered}`);
    }
    gl.detachShader(handle, frag);
    gl.deleteShader(frag);
    const units = [...source.matchAll(SAMPLER)].map((m) => Number(m[2]));
    const arrays = new Set([...source.matchAll(SAMPLER)].filter((m) => m[1]).map((m) => Number(m[2])));
    const locations = new Map();
    const count = gl.getProgramParameter(handle, gl.ACTIVE_UNIFORMS);
    for (let i = 0; i < count; i++) {
      const info = gl.getActiveUniform(handle, i);
      if (info) locations.set(info.name, gl.getUniformLocation(handle, info.name));
    }
    gl.useProgram(handle);
    for (const unit of units) {
      const loc = locations.get(`b${unit}`);
      if (loc) gl.uniform1i(loc, unit);
    }
    // render targets: texture_matmul's products pass of L rows a fragment writes L
    // (layout(location = t) out), the L layers of one array texture; an 8-row one in two
    // draws of 4 targets where the context has fewer than 8 (four)
    const split = FOUR_TARGETS.test(source);
    const layers = split ? 8 : Math.max(1, [...source.matchAll(/^layout\(location = \d+\) out /gm)].length);
    const targets = four ? 4 : layers;
    const rgba = /\bout\s+vec4\b/.test(source);
    const program = { handle, name, units, arrays, locations, rgba, layers, targets, values: new Map() };
    this.programs.set(source, program);
    return program;
  }

  /** Compile and link every source of `entries` ([source, name] pairs) at once, then render
   * each of `warm` (sources) into a 1x1 texture: drivers that build a program's GPU code at its
   * first draw (ANGLE on Vulkan and SwiftShader) build it here, not in the first eval.
   * KHR_parallel_shader_compile: the links run in the background while this polls
   * COMPLETION_STATUS_KHR between tasks. onProgress({stage, done, total}) as they finish. */
  async compileAll(entries, warm = [], onProgress = null) {
    const gl = this.gl;
    const report = (stage, done, total) => onProgress && onProgress({ stage, done, total });
    const todo = [];
    const started = new Set();
    for (const [source, name] of entries) {
      const code = codeOf(source);
      if (this.programs.has(code) || started.has(code)) continue;
      started.add(code);
      todo.push(this.startProgram(code, name));
    }
    const total = todo.length;
    report("shaders", 0, total);
    const ext = gl.getExtension("KHR_parallel_shader_compile");
    let pending = todo;
    while (pending.length) {
      const ready = ext ? pending.filter((p) => gl.getProgramParameter(p.handle, ext.COMPLETION_STATUS_KHR)) : pending.slice(0, 8);
      for (const p of ready) this.finishProgram(p);
      if (ready.length) {
        const done = new Set(ready);
        pending = pending.filter((p) => !done.has(p));
        report("shaders", total - pending.length, total);
      }
      if (pending.length) await new Promise((resolve) => setTimeout(resolve, 0));
      if (gl.isContextLost()) throw new DlcError("the WebGL2 context was lost");
    }
    // each distinct code once, drawn as its first pass (a shared program with that pass's dlc_k)
    const firsts = new Map();
    for (const [source, file] of warm) if (!firsts.has(codeOf(source))) firsts.set(codeOf(source), [source, file]);
    const programs = [...firsts.values()].map(([source, file]) => this.program(source, file));
    if (!programs.length) return;
    report("warm-up", 0, programs.length);
    // drawn into targets of the kind their passes render (a driver may build a program's code
    // for its framebuffer's attachments): R32F, RGBA32F, or n RGBA32F at once
    const rgba = this.texture(1, "a warm-up target", [1, 1]);
    const targets = [this.texture(1, "a warm-up target"), rgba];
    const layered = new Map(); // n -> an array texture of n layers
    for (const n of new Set(programs.map((p) => p.layers).filter((n) => n > 1))) {
      layered.set(n, this.texture(1, "a warm-up target", [1, 1], n));
      targets.push(layered.get(n));
    }
    const targetOf = (p) => (p.layers > 1 ? layered.get(p.layers) : p.rgba ? rgba : targets[0]);
    gl.bindTexture(gl.TEXTURE_2D, null); // no sampler reads a target
    gl.bindTexture(gl.TEXTURE_2D_ARRAY, null);
    try {
      for (let i = 0; i < programs.length; i += 8) {
        for (const program of programs.slice(i, i + 8)) this.pass(program, targetOf(program), new Map(), {});
        await drain(gl);
        report("warm-up", Math.min(i + 8, programs.length), programs.length);
      }
    } finally {
      for (const t of targets) this.deleteTexture(t);
    }
  }

  /** dlc_k of a bundle's shared program: the ints of the pass `program` views. */
  setInts(program) {
    const loc = this.location(program, "dlc_k[0]");
    if (loc !== null) this.gl.uniform1iv(loc, program.ints);
    program.values.set("dlc_k", program.ints);
  }

  /** A uniform's location (null: the program has no such active uniform; finishProgram looked
   * them all up, so a pass asks the context nothing). */
  location(program, name) {
    const loc = program.locations.get(name);
    return loc === undefined ? null : loc;
  }

  /** Run `program` over every texel of `target` (or only the texel `at`, a flat index; or the
   * rows holding the first `count` floats: a tensor in a larger slot's texture; or, for a
   * program of n render targets, an array texture of n layers): samplers maps a unit to the
   * texture it reads; ints sets int uniforms. */
  pass(program, target, samplers, ints, at = null, count = null) {
    const gl = this.gl;
    for (const tex of samplers.values()) {
      if (tex === target) throw new DlcError(`internal dlc error: pass '${program.name}' reads the texture it writes`);
    }
    target.version = (target.version || 0) + 1;
    gl.useProgram(program.handle);
    for (const [unit, tex] of samplers) {
      if (unit >= this.maxUnits) {
        throw new DlcError(`kernel pass '${program.name}' reads ${unit + 1} textures; this GPU's fragment shaders read at most ${this.maxUnits}`);
      }
      if (!tex.layers !== !program.arrays.has(unit)) {
        throw new DlcError(`internal dlc error: pass '${program.name}' reads unit ${unit} as ${program.arrays.has(unit) ? "an" : "no"} array texture`);
      }
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(tex.layers ? gl.TEXTURE_2D_ARRAY : gl.TEXTURE_2D, tex.handle);
    }
    const values = program.values; // the ints it holds now
    for (const [name, value] of Object.entries(ints)) {
      const loc = this.location(program, name);
      if (loc !== null && values.get(name) !== value) {
        gl.uniform1i(loc, value);
        values.set(name, value);
      }
    }
    if (program.ints && values.get("dlc_k") !== program.ints) this.setInts(program);
    let rows = 1;
    let draws = [null]; // the first layer each draw renders (a pass of n render targets)
    if (program.layers > 1) {
      // n render targets, the layers of `target`: the pass covers the first ceil(width / n)
      // columns of each (texture_matmul._quad); an 8-row pass on 4 targets, 4 layers a draw
      gl.viewport(0, 0, Math.ceil(target.width / program.layers), target.height);
      rows = target.height;
      draws = [];
      for (let first = 0; first < program.layers; first += program.targets) draws.push(first);
    } else if (at === null) {
      gl.bindFramebuffer(gl.FRAMEBUFFER, target.fbo);
      // the texels past the tensor: fragments that would only return (or write what nobody reads)
      rows = count === null ? target.height : Math.min(target.height, Math.max(Math.ceil(count / target.width), 1));
      gl.viewport(0, 0, target.width, rows);
    } else {
      gl.bindFramebuffer(gl.FRAMEBUFFER, target.fbo);
      gl.viewport(at % target.width, Math.floor(at / target.width), 1, 1);
    }
    gl.bindVertexArray(this.vao);
    const draw = () => {
      for (const first of draws) {
        if (first !== null) {
          gl.bindFramebuffer(gl.FRAMEBUFFER, this.framebufferOf(target, program.targets, first));
          const loc = program.layers > program.targets ? this.location(program, "dlc_rows0") : null;
          if (loc !== null) gl.uniform1i(loc, first);
        }
        gl.drawArrays(gl.TRIANGLES, 0, 3);
      }
    };
    if (this.timings) {
      // a one-texel readPixels waits for the GPU (Chromium's finish() does not)
      const wait = () => gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, new Float32Array(4));
      wait(); // what came before is not this pass's time
      const t0 = performance.now();
      draw();
      wait();
      this.timings.push({ pass: program.name, ms: performance.now() - t0, texels: at === null ? target.width * rows : 1 });
    } else draw();
  }

  /** A framebuffer rendering into n layers of array texture `tex` from layer `first`
   * (attachment t is layer first + t), kept on it. */
  framebufferOf(tex, n, first = 0) {
    const gl = this.gl;
    if (tex.layers < first + n) throw new DlcError(`internal dlc error: ${n} render targets into an array texture of ${tex.layers} layers`);
    if (!tex.multi) tex.multi = new Map();
    if (tex.multi.has(first)) return tex.multi.get(first);
    const fbo = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
    for (let t = 0; t < n; t++) gl.framebufferTextureLayer(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + t, tex.handle, 0, first + t);
    gl.drawBuffers(Array.from({ length: n }, (_, t) => gl.COLOR_ATTACHMENT0 + t));
    const status = gl.checkFramebufferStatus(gl.FRAMEBUFFER);
    if (status !== gl.FRAMEBUFFER_COMPLETE) {
      gl.deleteFramebuffer(fbo);
      throw new DlcError(`this WebGL2 cannot render into ${n} RGBA32F textures at once (framebuffer status 0x${status.toString(16)})`);
    }
    tex.multi.set(first, fbo);
    return fbo;
  }

  /** Copy the first `count` floats of `src` into `dst` (two textures of 4 floats a texel: of
   * one layout, texel by texel). */
  copy(dst, src, count = src.flat4 ? src.floats : src.count) {
    if (src.flat4 || dst.flat4) {
      if (!src.flat4 || !dst.flat4 || src.width !== dst.width || src.height !== dst.height) {
        throw new DlcError("internal dlc error: a copy between a packed texture and another layout");
      }
      this.pass(this.copy4Program, dst, new Map([[0, src]]), {}, null, Math.ceil(count / 4));
      return;
    }
    this.pass(this.copyProgram, dst, new Map([[0, src]]), { dlc_width: dst.width, dlc_count: count }, null, count);
  }

  /** Element 0 of `src` into element `at` of `dst`. */
  pick(dst, at, src) {
    this.pass(this.pickProgram, dst, new Map([[0, src]]), {}, at);
  }

  /** The first floats of each texture: reads = [[tex, count], ...] -> Float32Arrays. One fence
   * for all of them; the wait yields to the event loop instead of blocking it (`block`: a
   * plain readPixels each instead, which waits for the GPU without yielding: readTimed). */
  async read(reads, block = false) {
    const gl = this.gl;
    const first = reads.find(([tex]) => !tex.flat4 && !tex.layers);
    const [format, channels] = this.pickReadFormat(first ? first[0] : null);
    const pending = [];
    for (const [tex, count] of reads) {
      // a packed texture: 4 floats a texel, in order: RGBA/FLOAT, which WebGL2 reads from any RGBA32F framebuffer
      const flat4 = !!tex.flat4;
      const rows = count ? Math.ceil((flat4 ? Math.ceil(count / 4) : count) / tex.width) : 0;
      const floats = rows * tex.width * (flat4 ? 4 : channels);
      const readPixels = (into) => {
        if (!rows) return;
        gl.bindFramebuffer(gl.FRAMEBUFFER, tex.fbo);
        gl.readPixels(0, 0, tex.width, rows, flat4 ? gl.RGBA : format, gl.FLOAT, into);
      };
      if (block) {
        const all = new Float32Array(floats); // (readPixels waits for the GPU)
        readPixels(all);
        pending.push({ all, count, flat4 });
        continue;
      }
      const buffer = gl.createBuffer();
      gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
      gl.bufferData(gl.PIXEL_PACK_BUFFER, Math.max(floats, 1) * 4, gl.STREAM_READ);
      readPixels(0);
      pending.push({ buffer, floats, count, flat4 });
    }
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
    if (block) this.blocked++;
    else await drain(gl);
    return pending.map(({ buffer, floats, count, flat4, all }) => {
      if (!all) {
        all = new Float32Array(floats);
        gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
        if (floats) gl.getBufferSubData(gl.PIXEL_PACK_BUFFER, 0, all);
        gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
        gl.deleteBuffer(buffer);
      }
      if (channels === 1 || flat4) return all.subarray(0, count);
      // Copied as int32 bits: an i32 id's bits may be a NaN, which a float copy may change.
      const bits = new Int32Array(all.buffer);
      const out = new Int32Array(count);
      for (let i = 0; i < count; i++) out[i] = bits[i * channels];
      return new Float32Array(out.buffer);
    });
  }

  /** read(reads) at the end of a call of `units` units of the work named `key` (an eval of
   * one program, training steps): blocking where that work took under blockMs the last time
   * (per unit, times `units`), and that time measured again (the blocking wait, or the
   * fence's: a fence's includes the timers' clamping, so a call near the bound stays async). */
  async readTimed(reads, key, units = 1) {
    const last = this.waits.get(key);
    const block = this.timings === null && last !== undefined && last * units < this.blockMs;
    this.gl.flush();
    const t0 = performance.now();
    const out = await this.read(reads, block);
    this.waits.set(key, (performance.now() - t0) / units);
    return out;
  }

  /** RED/FLOAT where the implementation reads it from an R32F framebuffer, else RGBA/FLOAT
   * (which WebGL2 always accepts with EXT_color_buffer_float). */
  pickReadFormat(tex) {
    if (this.readFormat === null && tex) {
      const gl = this.gl;
      gl.bindFramebuffer(gl.FRAMEBUFFER, tex.fbo);
      const format = gl.getParameter(gl.IMPLEMENTATION_COLOR_READ_FORMAT);
      const type = gl.getParameter(gl.IMPLEMENTATION_COLOR_READ_TYPE);
      this.readFormat = format === gl.RED && type === gl.FLOAT ? [gl.RED, 1] : [gl.RGBA, 4];
    }
    return this.readFormat || [this.gl.RGBA, 4];
  }

  dispose() {
    const gl = this.gl;
    for (const tex of [...this.textures]) this.deleteTexture(tex);
    for (const program of this.programs.values()) gl.deleteProgram(program.handle);
    this.programs.clear();
    gl.deleteShader(this.vertex);
    gl.deleteVertexArray(this.vao);
    const lose = gl.getExtension("WEBGL_lose_context");
    if (lose) lose.loseContext();
  }
}

/** Resolve once the GPU has finished every command issued so far (a fence, flushed). */
async function drain(gl) {
  const sync = gl.fenceSync(gl.SYNC_GPU_COMMANDS_COMPLETE, 0);
  gl.flush();
  try {
    await waitFor(gl, sync);
  } finally {
    gl.deleteSync(sync);
  }
}

/** Resolve once `sync` has signaled. A sync's status changes only between tasks: poll from
 * zero timers, as TensorFlow.js does (a loop of MessageChannel messages polls hundreds of
 * times and starves the task that updates the status). */
async function waitFor(gl, sync) {
  for (;;) {
    const status = gl.clientWaitSync(sync, 0, 0);
    if (status === gl.ALREADY_SIGNALED || status === gl.CONDITION_SATISFIED) return;
    if (status === gl.WAIT_FAILED) throw new DlcError("the GPU fence failed (WAIT_FAILED); was the context lost?");
    if (gl.isContextLost()) throw new DlcError("the WebGL2 context was lost");
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

// -- shapes, sizes and feeds -----------------------------------------------------------------

const product = (xs) => xs.reduce((a, b) => a * b, 1);

/** A size written as [int, dim names...]: their product under `dims`. */
function evalSize(size, dims) {
  return size.slice(1).reduce((n, d) => n * dims[d], size[0]);
}

/** A dim's value: an int, a symbol, or a product of them written `2*B*T` (runtime/dims.py). */
function dimValue(d, dims) {
  if (typeof d !== "string") return d;
  return d.split("*").reduce((n, f) => n * (/^[0-9]+$/.test(f) ? Number(f) : dims[f]), 1);
}

function bindShape(shape, dims) {
  return shape.map((d) => dimValue(d, dims));
}

const isProduct = (d) => typeof d === "string" && d.includes("*");

const showShape = (shape) => `[${shape.join(", ")}]`;

/** An i32 input's values (an Int32Array, or whole numbers in the int32 range) as the
 * Float32Array view of their int32 bits: GL storage holds an id as its bits. */
function intBits(name, values) {
  let ints = values;
  if (!(values instanceof Int32Array)) {
    ints = new Int32Array(values.length);
    for (let i = 0; i < values.length; i++) {
      const v = Number(values[i]);
      if (!Number.isInteger(v) || v < -2147483648 || v > 2147483647) {
        throw new DlcError(`input '${name}' holds ${values[i]} at index ${i}: an i32 input takes int32 values`);
      }
      ints[i] = v;
    }
  }
  return new Float32Array(ints.buffer, ints.byteOffset, ints.length);
}

/** Check `feeds` (name -> {data, shape}) against the model's inputs; return the Float32Array
 * of each fed input in `needed` (an i32 input's by its bits, `dtypes`) and the dims they bind.
 * Feeds the model does not have are refused; inputs it has but does not need here are ignored. */
function checkFeeds(inputs, feeds, needed, dtypes = {}) {
  const arrays = {};
  const dims = {};
  const boundBy = {};
  for (const [name, feed] of Object.entries(feeds || {})) {
    if (!has(inputs, name)) {
      throw new DlcError(`the model has no input '${name}' (its inputs: ${Object.keys(inputs).join(", ")})`);
    }
    if (!needed.has(name)) continue;
    if (!feed || !feed.shape || feed.data === undefined) {
      throw new DlcError(`input '${name}': a feed is {data: Float32Array, shape: [...]}`);
    }
    const declared = inputs[name];
    const shape = Array.from(feed.shape, Number);
    if (shape.length !== declared.length || shape.some((d) => !Number.isInteger(d) || d < 0)) {
      throw new DlcError(`input '${name}' is declared ${showShape(declared)} but fed shape ${showShape(shape)}`);
    }
    const data =
      dtypes[name] === "i32"
        ? intBits(name, feed.data)
        : feed.data instanceof Float32Array
          ? feed.data
          : Float32Array.from(feed.data);
    if (data.length !== product(shape)) {
      throw new DlcError(`input '${name}': shape ${showShape(shape)} holds ${product(shape)} values, its data has ${data.length}`);
    }
    declared.forEach((d, axis) => {
      if (typeof d === "number" && d !== shape[axis]) {
        throw new DlcError(`input '${name}' is declared ${showShape(declared)} but fed shape ${showShape(shape)} (axis ${axis})`);
      }
      if (typeof d === "string" && !isProduct(d)) {
        if (has(dims, d) && dims[d] !== shape[axis]) {
          throw new DlcError(
            `dim ${d} is ${dims[d]} in input '${boundBy[d]}' but ${shape[axis]} in input '${name}' (shape ${showShape(shape)})`,
          );
        }
        dims[d] = shape[axis];
        boundBy[d] = name;
      }
    });
    arrays[name] = data;
  }
  for (const [name, feed] of Object.entries(feeds || {})) {
    if (!needed.has(name)) continue;
    inputs[name].forEach((d, axis) => {
      // a product (B*T) is checked once the symbols it is made of are bound
      if (isProduct(d) && dimValue(d, dims) !== Number(feed.shape[axis])) {
        throw new DlcError(`input '${name}' is declared ${showShape(inputs[name])}: ${d} = ${dimValue(d, dims)}, fed ${feed.shape[axis]}`);
      }
    });
  }
  for (const name of needed) {
    if (name !== LR && !has(arrays, name)) throw new DlcError(`input '${name}' is missing`);
  }
  return { arrays, dims };
}

// -- programs ---------------------------------------------------------------------------------

/** Params and optimizer state as textures by name (shared by the eval and train programs). */
class Store {
  /** `leaves`: name -> Float32Array, from readLeaves; `packed`: the names of the params stored
   * 4 values a texel (manifest.web.packed: every kernel reads them so, their updates write so). */
  constructor(device, leaves, packed = new Set()) {
    this.device = device;
    this.buffers = new Map();
    this.scratch = new Set(); // leaves of zeros() (a generation's caches): no snapshot copies them
    for (const [name, values] of leaves) {
      const what = `'${name}' (${values.length} floats)`;
      const tex = packed.has(name) ? device.flat4Texture(values.length, what) : device.texture(values.length, what);
      device.upload(tex, values);
      this.buffers.set(name, tex);
    }
  }

  buffer(name) {
    const tex = this.buffers.get(name);
    if (!tex) throw new DlcError(`internal dlc error: no stored param or state '${name}'`);
    return tex;
  }

  /** Leaf `name` (made if new: a cache's state, not of weights.bin) as `count` zeros. */
  zeros(name, count) {
    let tex = this.buffers.get(name);
    if (!tex || tex.count < count) {
      this.device.deleteTexture(tex);
      tex = this.device.texture(count, `'${name}' (${count} floats)`);
      this.buffers.set(name, tex);
      this.scratch.add(name);
    }
    this.device.upload(tex, new Float32Array(count));
  }

  /** Put `tex` in place of leaf `name`'s texture; return the old one. */
  replace(name, tex) {
    const old = this.buffer(name);
    this.buffers.set(name, tex);
    return old;
  }

  /** What restore() puts back: each leaf (but the scratch ones) as it is now, taken as it
   * is written (hold()): no copy of a leaf that nothing writes, nor of one a pass renders anew
   * (its old texture is kept instead). */
  snapshot() {
    return new Map();
  }

  /** Before leaf `name` changes: keep its texture in `snap` (`moved`: the leaf gets another
   * texture and this one is no longer written; else a copy of it, as it is written in place). */
  hold(snap, name, moved) {
    if (!snap || snap.has(name) || this.scratch.has(name)) return false;
    const tex = this.buffer(name);
    if (moved) snap.set(name, tex);
    else {
      const copy = tex.flat4 ? this.device.flat4Texture(tex.floats) : this.device.texture(tex.count);
      this.device.copy(copy, tex);
      snap.set(name, copy);
    }
    return true;
  }

  /** Put the snapshot's leaves back; returns the textures they replace. */
  restore(snap) {
    return [...snap].map(([name, tex]) => this.replace(name, tex));
  }
}

/** Runs one compiled program spec (manifest.programs.eval, .outputs, .train or a KV cache's) against the Store. */
class Executor {
  constructor(device, spec, sources, store) {
    this.device = device;
    this.spec = spec;
    this.store = store;
    this.kernels = spec.kernels;
    this.slots = spec.slots;
    this.tensors = new Map(Object.entries(spec.tensors).map(([t, info]) => [Number(t), info]));
    this.producer = new Map(Object.entries(spec.producer).map(([t, k]) => [Number(t), k]));
    for (const k of this.kernels) {
      if (k.scalars && Object.keys(k.scalars).length) {
        throw new DlcError(`kernel ${k.name} takes number inputs, which the texture target does not`);
      }
    }
    this.programs = this.kernels.map((k) => k.passes.map((p) => device.program(sources[p.file], p.file)));
    this.kernels.forEach((k, i) => {
      k.passes.forEach((p, j) => {
        // a pass with n render targets renders packed units into .. into + n - 1, all one size
        const n = this.programs[i][j].layers;
        if (n === 1) return;
        const first = (k.packed || []).find((q) => q.unit === p.into);
        for (let t = 0; t < n; t++) {
          const q = (k.packed || []).find((x) => x.unit === p.into + t);
          if (!first || !q || String(q.rows) !== String(first.rows) || String(q.depth) !== String(first.depth)) {
            throw new DlcError(`${spec.name}: kernel ${k.name}'s pass ${p.file} writes ${n} textures, but unit ${p.into + t} is not a packed texture the size of unit ${p.into}`);
          }
        }
      });
    });
    // each update copy whose source a step may hand over (applyCopies): a temp's slot that no
    // later copy of the step reads
    this.handover = spec.copies.map((c, i) => {
      const s = this.tensors.get(c.tensor).slot;
      return this.slots[s].kind === "temp" && !spec.copies.slice(i + 1).some((d) => this.tensors.get(d.tensor).slot === s);
    });
    this.buffers = new Map(); // slot -> texture (temps, inputs, consts)
    this.scratch = new Map(); // kernel -> its partial results (split reductions)
    this.packedSize = new Map(); // "kernel:unit" -> [width, height] of a packed texture
    this.packed = new Map(); // "width x height x layers" -> free packed textures (live only while their kernel runs)
    this.kept = new Map(); // "kernel:unit" -> {tex, stamp}: a pack of params and constants alone, kept between calls
    this.spare = new Map(); // "width x height" -> textures to render into
    this.snapshot = null; // Model.train: what its steps changed, as it was before them (Store.hold)
    this.dims = {};
    this.slots.forEach((slot, s) => {
      if (slot.kind === "const") {
        const values = Float32Array.from([slot.values].flat(Infinity)); // a number or nested lists
        const tex = device.texture(values.length, `a constant of ${spec.name}`);
        device.upload(tex, values);
        this.buffers.set(s, tex);
      }
    });
  }

  slotBuffer(s) {
    const slot = this.slots[s];
    return PERSISTENT.has(slot.kind) ? this.store.buffer(slot.name) : this.buffers.get(s);
  }

  /** Size the temp and input textures for this binding of the dims. */
  prepare(dims) {
    this.slots.forEach((slot, s) => {
      if (slot.kind !== "temp" && slot.kind !== "input") return;
      const need = Math.max(...slot.sizes.map((z) => evalSize(z, dims)));
      const tex = this.buffers.get(s);
      if (!tex || tex.count < need) {
        this.device.deleteTexture(tex);
        this.buffers.set(s, this.device.texture(need, this.describe(s, dims)));
      }
    });
    this.kernels.forEach((k, i) => {
      if (!k.scratch) return;
      const need = evalSize(k.scratch.size, dims);
      const tex = this.scratch.get(i);
      if (!tex || tex.count < need) {
        this.device.deleteTexture(tex);
        this.scratch.set(i, this.device.texture(need, `the partial results of ${k.name}`));
      }
    });
    this.kernels.forEach((k, i) => {
      for (const q of k.packed || []) {
        const what = `the packed copy of ${q.label || "an operand"} in kernel ${k.name}`;
        this.packedSize.set(`${i}:${q.unit}`, this.device.packedLayout(evalSize(q.rows, dims), evalSize(q.depth, dims), what));
      }
    });
    this.dims = dims;
  }

  describe(s, dims) {
    const names = [...this.tensors.values()]
      .filter((info) => info.slot === s)
      .slice(0, 3)
      .map((info) => `'${info.label}' ${showShape(info.shape)} = ${showShape(bindShape(info.shape, dims))}`);
    return `tensor ${names.join(", ") || `slot ${s}`}`;
  }

  /** The kernels to run for `fetch` (all of them for a training step) and the inputs they read. */
  needs(fetch, step = false) {
    let kernels;
    if (step) kernels = this.kernels.map((_, i) => i);
    else {
      const want = new Set();
      const stack = fetch.filter((t) => this.producer.has(t)).map((t) => this.producer.get(t));
      while (stack.length) {
        const k = stack.pop();
        if (!want.has(k)) {
          want.add(k);
          stack.push(...this.kernels[k].after);
        }
      }
      kernels = [...want].sort((a, b) => a - b);
    }
    const names = new Set(kernels.flatMap((k) => this.kernels[k].inputs));
    for (const t of fetch) {
      const slot = this.slots[this.tensors.get(t).slot];
      if (slot.kind === "input") names.add(slot.name);
    }
    return { kernels, names };
  }

  upload(arrays) {
    this.slots.forEach((slot, s) => {
      if (slot.kind === "input" && has(arrays, slot.name)) this.device.upload(this.buffers.get(s), arrays[slot.name]);
    });
  }

  launch(kernels) {
    const device = this.device;
    for (const k of kernels) {
      const spec = this.kernels[k];
      const samplers = new Map(spec.slots.map((s, unit) => [unit, this.slotBuffer(s)]));
      if (spec.scratch) samplers.set(spec.scratch.unit, this.scratch.get(k));
      // a pack pass reading only params, state and constants renders once while they stay the same
      const keep = new Set();
      spec.passes.forEach((p, i) => {
        const program = this.programs[k][i];
        const steady = program.units.every((u) => u < spec.slots.length && STEADY.has(this.slots[spec.slots[u]].kind));
        if (p.into !== undefined && p.into !== null && program.layers === 1 && steady) keep.add(p.into);
      });
      // a pass of n render targets renders units into .. into + n - 1: the layers of one array texture, on unit into
      const layers = new Map(); // unit -> its array texture's layers (0: a unit of the layers after the first)
      spec.passes.forEach((p, i) => {
        const n = this.programs[k][i].layers;
        if (n > 1) for (let t = 0; t < n; t++) layers.set(p.into + t, t ? 0 : n);
      });
      const packed = (spec.packed || []).map((q) => {
        const size = this.packedSize.get(`${k}:${q.unit}`);
        if (layers.has(q.unit)) {
          if (!layers.get(q.unit)) return null;
          const tex = this.takePacked(size, layers.get(q.unit));
          samplers.set(q.unit, tex);
          return tex;
        }
        if (!keep.has(q.unit)) {
          const tex = this.takePacked(size);
          samplers.set(q.unit, tex);
          return tex;
        }
        let kept = this.kept.get(`${k}:${q.unit}`);
        if (!kept || kept.tex.width !== size[0] || kept.tex.height !== size[1]) {
          if (kept) device.deleteTexture(kept.tex);
          kept = { tex: device.texture(size[0] * size[1], "a packed texture", size), stamp: null };
          this.kept.set(`${k}:${q.unit}`, kept);
        }
        samplers.set(q.unit, kept.tex);
        return null; // not the pool's
      });
      const read = new Set(spec.reads.map((t) => this.tensors.get(t).slot));
      const ints = {};
      for (const [u, d] of Object.entries(spec.uniforms)) ints[u] = this.dims[d];
      const swaps = [];
      spec.passes.forEach((p, i) => {
        const program = this.programs[k][i];
        const used = new Map(program.units.map((u) => [u, samplers.get(u)]));
        const kept = keep.has(p.into) ? this.kept.get(`${k}:${p.into}`) : null;
        const stamp = kept ? [...used.values()].map((t) => [t, t.version]) : null;
        // kept: rendered already from these very textures, unwritten since (their versions)
        if (kept && kept.stamp && kept.stamp.length === stamp.length && kept.stamp.every(([t, v], j) => stamp[j][0] === t && stamp[j][1] === v)) return;
        let target;
        let count = null; // the floats of the tensor a pass writes (its texture may be larger)
        if (program.layers > 1) target = samplers.get(p.into); // an array texture of as many layers
        else if (p.into !== undefined && p.into !== null) target = samplers.get(p.into); // a packed texture
        else if (p.tensor === null) {
          target = this.scratch.get(k); // a split reduction's partials, attention_cached's scores
          count = evalSize(spec.scratch.size, this.dims); // (its texture sized for the largest dims)
        }
        else {
          const info = this.tensors.get(p.tensor);
          const s = info.slot;
          count = product(bindShape(info.shape, this.dims));
          target = this.slotBuffer(s);
          if (!target.flat4 !== !program.rgba) {
            throw new DlcError(`${this.spec.name}: pass ${p.file} renders ${program.rgba ? "4 values" : "one value"} a texel into '${info.label}', stored ${target.flat4 ? "4 values" : "one value"} a texel`);
          }
          if (target.flat4) count = Math.ceil(count / 4); // texels
          if (read.has(s)) {
            target = this.takeSpare(target);
            swaps.push([s, target]);
          } else if (PERSISTENT.has(this.slots[s].kind)) this.store.hold(this.snapshot, this.slots[s].name, false);
        }
        device.pass(program, target, used, { ...ints, dlc_width: target.width }, null, count);
        if (kept) kept.stamp = stamp; // (once rendered)
      });
      for (const tex of packed) if (tex) this.packed.get(`${tex.width}x${tex.height}x${tex.layers || 0}`).push(tex);
      for (const [s, tex] of swaps) {
        const slot = this.slots[s];
        let old;
        if (PERSISTENT.has(slot.kind)) {
          const held = this.store.hold(this.snapshot, slot.name, true); // (the snapshot keeps it)
          old = this.store.replace(slot.name, tex);
          if (held) continue;
        } else {
          old = this.buffers.get(s);
          this.buffers.set(s, tex);
        }
        this.giveSpare(old);
      }
    }
  }

  takePacked([width, height], layers = 0) {
    const key = `${width}x${height}x${layers}`;
    if (!this.packed.has(key)) this.packed.set(key, []);
    const pool = this.packed.get(key);
    return pool.length ? pool.pop() : this.device.texture(width * height, "a packed texture", [width, height], layers);
  }

  /** A texture back to the spare pool (rendered into by a later pass). */
  giveSpare(tex) {
    const key = spareKey(tex);
    if (!this.spare.has(key)) this.spare.set(key, []);
    this.spare.get(key).push(tex);
  }

  takeSpare(like) {
    const pool = this.spare.get(spareKey(like));
    if (pool && pool.length) return pool.pop();
    return like.flat4 ? this.device.flat4Texture(like.floats) : this.device.texture(like.count);
  }

  /** After a training step: the updated params and state into the store. A temp's texture of
   * the param's own layout becomes the param's (and the param's old one the temp's: a step's
   * temps are dead once its kernels ran), with no copy pass; any other is copied. */
  applyCopies() {
    this.spec.copies.forEach((c, i) => {
      const s = this.tensors.get(c.tensor).slot;
      const src = this.slotBuffer(s);
      const dst = this.store.buffer(c.target);
      if (this.handover[i] && spareKey(src) === spareKey(dst) && !src.layers) {
        const held = this.store.hold(this.snapshot, c.target, true); // (the snapshot keeps dst)
        this.store.replace(c.target, src);
        this.buffers.set(s, held ? this.takeSpare(src) : dst);
        return;
      }
      this.store.hold(this.snapshot, c.target, false);
      this.device.copy(dst, src, product(bindShape(this.tensors.get(c.tensor).shape, this.dims)));
    });
  }

  /** [texture, count, shape] of tensor `t` under the current dims. */
  where(t) {
    const info = this.tensors.get(t);
    const shape = bindShape(info.shape, this.dims);
    return [this.slotBuffer(info.slot), product(shape), shape];
  }
}

/** The spare pool a texture goes to: by size and kind (R32F, or 4 floats a texel). */
const spareKey = (tex) => `${tex.width}x${tex.height}${tex.flat4 ? "x4" : ""}`;

/** A loaded export: eval, train, params, dispose. */
class Model {
  constructor(device, manifest, sources, leaves) {
    this.device = device;
    this.manifest = manifest;
    this.sources = sources;
    this.inputs = manifest.inputs; // name -> declared shape (dim names for symbolic dims)
    this.dtypes = manifest.dtypes || {}; // the i32 inputs and tensors (the rest are f32)
    this.paramShapes = manifest.params;
    this.tensorShapes = manifest.tensors;
    this.losses = manifest.losses;
    this.store = new Store(device, leaves, new Set(manifest.web.packed || []));
    this.executors = new Map();
    this.disposed = false;
    const kv = manifest.web.kv_cache;
    // the key/value cache generate() keeps (null: none; kvCacheRefused says why, if the model has none)
    this.kvCache = kvCacheOf(manifest) ? { block: kv.block } : null;
    this.kvCacheRefused = isObject(kv) && has(kv, "refused") ? kv.refused : null;
    this.cache = null; // the KVCache, once a generation uses it
    this.lastGeneration = null; // {cache, prefills, steps, windows} of the last generate()
  }

  /** The executor of program `name`, its shaders compiled first in parallel where they are not yet. */
  async compiled(name) {
    this.checkAlive();
    const program = this.manifest.programs[name];
    await fetchSources([program], this.shaders, this.sources);
    this.checkAlive();
    await this.device.compileAll(programEntries(program, this.sources));
    return this.executor(name);
  }

  executor(name) {
    this.checkAlive();
    let ex = this.executors.get(name);
    if (!ex) {
      ex = new Executor(this.device, this.manifest.programs[name], this.sources, this.store);
      this.executors.set(name, ex);
    }
    return ex;
  }

  checkAlive() {
    if (this.disposed) throw new DlcError("this model was disposed");
  }

  /** Evaluate named tensors: feeds maps input names to {data: Float32Array, shape}; resolves
   * to {name: {data, shape}} for each name in `fetches` (a name or a list of names). */
  async eval(feeds, fetches) {
    const names = typeof fetches === "string" ? [fetches] : Array.from(fetches || []);
    if (!names.length) throw new DlcError("eval needs the names of the tensors to fetch");
    const tensors = names.map((n) => {
      if (typeof n !== "string" || !has(this.manifest.names, n)) {
        throw new DlcError(`no tensor named '${n}' in the model (it has: ${Object.keys(this.manifest.names).join(", ")})`);
      }
      return this.manifest.names[n];
    });
    // the model's outputs from their own program (fused across the names between them), any
    // other name from eval's (every named tensor: its shaders compiled on this first use)
    const outputs = this.manifest[OUTPUTS];
    const program = outputs && names.every((n) => outputs.includes(n)) ? OUTPUTS : "eval";
    const ex = this.executors.get(program) || (await this.compiled(program));
    const { kernels, names: needed } = ex.needs(tensors);
    const { arrays, dims } = checkFeeds(this.inputs, feeds, needed, this.dtypes);
    ex.prepare(this.allDims(ex, kernels, tensors, dims));
    ex.upload(arrays);
    ex.launch(kernels);
    const where = tensors.map((t) => ex.where(t));
    const values = await this.device.readTimed(where.map(([tex, count]) => [tex, count]), `eval:${program}`);
    const typed = (n, v) => (this.dtypes[n] === "i32" ? new Int32Array(v.buffer, v.byteOffset, v.length) : v);
    return Object.fromEntries(names.map((n, i) => [n, { data: typed(n, values[i]), shape: where[i][2] }]));
  }

  /** eval(feeds, fetches), each pass timed alone (waiting for the GPU before and after it: slower than
   * eval, for finding where the time goes): resolves to {out, passes: [{pass, ms, texels}]}. */
  async profile(feeds, fetches) {
    this.device.timings = [];
    try {
      const out = await this.eval(feeds, fetches);
      return { out, passes: this.device.timings };
    } finally {
      this.device.timings = null;
    }
  }

  /** `dims` plus 1 for each dim that only unfed inputs bind; an error when the kernels that run
   * (or the fetched tensors) need one of those. */
  allDims(ex, kernels, fetch, dims) {
    const used = new Set();
    const symbols = (d) => (typeof d === "string" ? d.split("*").filter((f) => !/^[0-9]+$/.test(f)) : []);
    const addShape = (t) => ex.tensors.get(t).shape.forEach((d) => symbols(d).forEach((s) => used.add(s)));
    fetch.forEach(addShape);
    for (const k of kernels) {
      Object.values(ex.kernels[k].uniforms).forEach((d) => used.add(d));
      ex.kernels[k].reads.forEach(addShape);
      ex.kernels[k].writes.forEach(addShape);
    }
    for (const d of [...used].sort()) {
      if (!has(dims, d)) {
        const binders = Object.keys(this.inputs).filter((n) => this.inputs[n].includes(d));
        throw new DlcError(`fetching these tensors needs the dim ${d}: feed ${binders.map((n) => `'${n}'`).join(" or ")}, which binds it`);
      }
    }
    const all = { ...dims };
    for (const shape of Object.values(this.inputs)) for (const d of shape) for (const s of symbols(d)) if (!has(all, s)) all[s] = 1;
    return all;
  }

  /** Train with the optimizer compiled in: options {steps, epochs = 1, batchSize = 32,
   * shuffle = false, lr (default: the compiled one)}. Batches are consecutive rows along the
   * batch dim (a permutation per epoch with shuffle), the last of an epoch may be smaller;
   * `steps` wins over `epochs`. Resolves to each step's loss (read once, at the end). A
   * non-finite loss puts the params back as they were before this call and throws. */
  async train(feeds, options = {}) {
    const setup = this.manifest.train;
    if (!setup) throw new DlcError("this export has no training step: its model has no loss");
    const ex = this.executor("train");
    const lossTensor = ex.spec.roots[0];
    const { names: needed } = ex.needs([lossTensor], true);
    needed.delete(LR);
    const { arrays, dims } = checkFeeds(this.inputs, feeds, needed, this.dtypes);
    const dim = this.batchDim(Object.keys(arrays));
    const n = dim === null ? 1 : dims[dim];
    if (dim !== null && n === 0) throw new DlcError(`no examples to train on: dim ${dim} is 0`);
    const batchSize = options.batchSize === undefined ? 32 : options.batchSize;
    const size = batchSize === null ? n : Math.min(n, batchSize);
    if (!Number.isInteger(size) || size < 1) throw new DlcError(`batchSize must be a positive integer, not ${batchSize}`);
    const perEpoch = Math.ceil(n / size);
    const total = options.steps !== undefined ? options.steps : (options.epochs === undefined ? 1 : options.epochs) * perEpoch;
    if (!Number.isInteger(total) || total < 0) throw new DlcError(`steps and epochs must be whole numbers, not ${total}`);
    const lr = new Float32Array([options.lr === undefined ? setup.optimizer.lr : Number(options.lr)]);
    if (total === 0) return [];

    const device = this.device;
    const losses = device.texture(total, "the training losses");
    let before = this.store.snapshot(); // filled as the steps write the params and state
    ex.snapshot = before;
    try {
      let order = null;
      const lossWhere = () => ex.where(lossTensor)[0];
      for (let k = 0; k < total; k++) {
        const pos = k % perEpoch;
        let batch = arrays;
        let bdims = dims;
        if (dim !== null) {
          if (pos === 0 && options.shuffle) order = permutation(n);
          const start = pos * size;
          const stop = Math.min(start + size, n);
          batch = {};
          for (const [name, data] of Object.entries(arrays)) batch[name] = rows(data, dims[dim], start, stop, order);
          bdims = { ...dims, [dim]: stop - start };
        }
        ex.prepare(this.allDims(ex, ex.kernels.map((_, i) => i), [lossTensor], bdims));
        ex.upload({ ...batch, [LR]: lr });
        ex.launch(ex.kernels.map((_, i) => i));
        device.pick(losses, k, lossWhere());
        ex.applyCopies();
        if (k % YIELD_EVERY === YIELD_EVERY - 1) await new Promise((resolve) => setTimeout(resolve, 0));
      }
      const [values] = await device.readTimed([[losses, total]], "train", total);
      const bad = values.findIndex((v) => !Number.isFinite(v));
      if (bad >= 0) {
        for (const tex of this.store.restore(before)) ex.giveSpare(tex);
        before = null; // restored: those textures are the params now
        throw new DlcError(`training diverged: step ${bad + 1} has loss ${values[bad]}; the params are back as they were before train()`);
      }
      return Array.from(values);
    } finally {
      ex.snapshot = null;
      if (before) for (const tex of before.values()) ex.giveSpare(tex); // (for the next call's steps to render into)
      device.deleteTexture(losses);
    }
  }

  /** The dim training batches along: the symbolic dim leading every fed input (null: none
   * leads with one, and each step takes all the data), as the Python runtime draws them. */
  batchDim(names) {
    const leading = names.map((n) => this.inputs[n][0]);
    const symbolic = new Set(leading.filter((d) => typeof d === "string"));
    if (!symbolic.size) return null;
    if (symbolic.size > 1 || leading.some((d) => typeof d !== "string")) {
      const shown = names.map((n) => `'${n}' ${showShape(this.inputs[n])}`).join(", ");
      throw new DlcError(
        `training draws batches along the first axis of every input, so the inputs must share a leading symbolic dim: ${shown}`,
      );
    }
    return [...symbolic][0];
  }

  /** The params' current values: {name: {data: Float32Array, shape}}. */
  async params() {
    this.checkAlive();
    const names = Object.keys(this.paramShapes);
    const values = await this.device.read(names.map((n) => [this.store.buffer(n), product(this.paramShapes[n])]));
    return Object.fromEntries(names.map((n, i) => [n, { data: values[i], shape: this.paramShapes[n].slice() }]));
  }

  /** Continue `prompt` (token ids) by `tokens` ids drawn from the model's `logits`, as
   * dlc/generate.py does (the same ids for the same seed and weights): options {tokens = 100,
   * temperature = 1, topK = null, seed = 0, block (default: the vocab's), cache = true,
   * onToken(id), signal (an AbortSignal: stop early)}. With the export's key/value cache
   * (`kvCache`; cache: false recomputes the whole context each token instead) the prompt runs
   * as one prefill, then each step runs the one new id, each layer's keys and values kept in
   * textures between steps; once the context is the whole block, every step runs the window
   * (nanoGPT crops it: the positions shift), as `dlc generate` does. Each step reads back the
   * last position's logits, draws the next id and returns to the event loop. Resolves to the
   * new ids. */
  async generate(prompt, options = {}) {
    const o = generationOptions(this, options);
    const ids = promptIds(prompt, this.tensorShapes.logits[2]);
    const kv = o.cache && o.tokens ? this.kvCacheFor(o.block) : null;
    const stats = { cache: kv !== null, prefills: 0, steps: 0, windows: 0 };
    this.lastGeneration = stats;
    const window = ids.slice(-o.block); // the context: the last `block` ids
    let cached = 0; // the window's first ids whose keys and values the caches hold
    const out = [];
    if (kv) kv.start();
    for (let step = 0; step < o.tokens && !(o.signal && o.signal.aborted); step++) {
      let row;
      if (kv) {
        const fresh = window.slice(cached);
        stats[fresh.length === o.block ? "windows" : fresh.length > 1 || !cached ? "prefills" : "steps"] += 1;
        row = await kv.logits(fresh, cached, o.block);
        cached = window.length;
      } else {
        const context = Int32Array.from(window);
        const { logits } = await this.eval({ tokens: { data: context, shape: [1, context.length] } }, ["logits"]);
        const size = logits.shape[2];
        row = logits.data.subarray((context.length - 1) * size, context.length * size);
        stats.windows += 1;
      }
      const next = sample(row, o.temperature, o.topK, uniform(o.seed, step));
      if (window.length === o.block) {
        window.shift(); // the context cropped: every position moved, the next step runs the window
        cached = 0;
      }
      window.push(next);
      out.push(next);
      if (o.onToken) o.onToken(next);
      await new Promise((resolve) => setTimeout(resolve, 0)); // the page shows the token
    }
    return out;
  }

  /** The key/value cache for generating with contexts up to `block` (null: the export has
   * none, or one of fewer rows). */
  kvCacheFor(block) {
    this.checkAlive();
    const spec = kvCacheOf(this.manifest);
    if (!spec || block > spec.block) return null;
    if (!this.cache) this.cache = new KVCache(this, spec);
    return this.cache;
  }

  /** generate() over text with the export's vocabulary: `prompt` a string, onToken(character);
   * resolves to the generated text (without the prompt). */
  async generateText(prompt, options = {}) {
    if (!this.vocab) throw new DlcError("this export has no vocabulary (export a language model with W.vocab.json beside its weights)");
    const { chars, ids } = this.vocab;
    const ints = Array.from(String(prompt), (c, at) => {
      if (!ids.has(c)) {
        throw new DlcError(`the prompt: the character ${JSON.stringify(c)} at position ${at} is not in the model's vocabulary (${chars.length} characters)`);
      }
      return ids.get(c);
    });
    const onToken = options.onToken ? (i) => options.onToken(chars[i]) : undefined;
    const out = await this.generate(ints, { ...options, onToken });
    return out.map((i) => chars[i]).join("");
  }

  /** Free every texture and program, and the context. */
  dispose() {
    if (this.disposed) return;
    this.disposed = true;
    this.device.dispose();
    this.executors.clear();
  }
}

/** The key/value cache's programs over a Model's store (dlc/generate.py KVCache): the caches
 * and the weights read transposed are store leaves (batch 1), made by `start`. */
class KVCache {
  constructor(model, spec) {
    this.model = model;
    this.spec = spec;
    const [, length] = model.inputs.tokens;
    this.length = length; // the dim of the new ids (T)
    this.dims = {}; // every dim of the model's inputs 1 (a batch of one), T bound each step
    for (const shape of Object.values(model.inputs)) {
      for (const d of shape) if (typeof d === "string") for (const f of d.split("*")) if (!/^[0-9]+$/.test(f)) this.dims[f] = 1;
    }
    this.position = new Int32Array(1);
  }

  /** Empty caches, and the weights read transposed from the params as they are now. */
  start() {
    const store = this.model.store;
    for (const [name, shape] of [...Object.entries(this.spec.caches), ...Object.entries(this.spec.hoisted)]) {
      store.zeros(name, product(shape.map((d) => (typeof d === "string" ? 1 : d))));
    }
    if (this.spec.constants) this.launch(this.spec.constants, {});
  }

  /** Run program `name` on `arrays` (all of its kernels, then its copies) at the dims of `n` new ids. */
  launch(name, arrays, n = 1) {
    const ex = this.model.executor(name);
    ex.prepare({ ...this.dims, [this.length]: n });
    ex.upload(arrays);
    ex.launch(ex.kernels.map((_, i) => i));
    ex.applyCopies();
    return ex;
  }

  /** The logits (a Float32Array of V) of the last of `ids`, new ids at positions [pos, pos +
   * n) (the caches holding [0, pos)); n = block: the window step, which needs no cache. */
  async logits(ids, pos, block) {
    const tokens = intBits("tokens", Int32Array.from(ids));
    let ex;
    if (ids.length === block) ex = this.launch(this.spec.window, { tokens }, ids.length);
    else {
      this.position[0] = pos;
      ex = this.launch(this.spec.step, { tokens, [this.spec.position]: intBits(this.spec.position, this.position) }, ids.length);
    }
    const [tex, count] = ex.where(ex.spec.roots[0]);
    const [row] = await this.model.device.read([[tex, count]]);
    return row;
  }
}

/** Rows [start, stop) of a row-major array of `n` rows (through `order` when shuffled). */
function rows(data, n, start, stop, order) {
  const width = data.length / n;
  if (!order) return data.subarray(start * width, stop * width);
  const out = new Float32Array((stop - start) * width);
  for (let i = start; i < stop; i++) out.set(data.subarray(order[i] * width, (order[i] + 1) * width), (i - start) * width);
  return out;
}

function permutation(n) {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

// -- language models: the vocabulary and sampling (dlc/text.py, dlc/generate.py) ----------

const MAX_VOCAB = 1 << 20; // characters, as dlc/text.py
const MAX_BLOCK = 1 << 24;

/** The export's vocab.json (manifest.web.vocab; null: none), checked as dlc/text.py's
 * Vocab.load checks it, and against the model: one character per logit, a block. */
async function loadVocab(m, base, where) {
  const fail = failAt(where);
  const file = m.web.vocab;
  if (file === undefined || file === null) return null;
  checkFileName(file, "web.vocab", fail);
  const logits = m.tensors.logits;
  const tokens = m.inputs.tokens;
  if (!Array.isArray(tokens) || tokens.length !== 2 || typeof tokens[1] !== "string" || !Array.isArray(logits) || logits.length !== 3) {
    fail("web.vocab", "a vocabulary needs a language model: an input 'tokens' [B, T] (T symbolic) and a tensor 'logits' [B, T, V]");
  }
  if ((m.dtypes || {}).tokens !== "i32") fail("web.vocab", "the language model's input 'tokens' must be i32");
  const text = await fetchOk(new URL(file, base)).then((r) => r.text());
  const bad = (problem) => {
    throw new DlcError(`${file}: ${problem}`);
  };
  if (text.length > 64 * MAX_VOCAB) bad(`${text.length} characters is too large for a vocabulary file`);
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    bad(`not a vocabulary file (${e.message})`);
  }
  if (!isObject(v) || v.format !== "dlc-vocab" || v.kind !== "chars") bad("not a dlc character vocabulary (format 'dlc-vocab', kind 'chars')");
  if (!Array.isArray(v.chars)) bad("'chars' must be a list of characters");
  if (!v.chars.length || v.chars.length > MAX_VOCAB) bad(`a vocabulary holds 1 to ${MAX_VOCAB} characters, not ${v.chars.length}`);
  const ids = new Map();
  v.chars.forEach((c, i) => {
    // one character: one code point, as Python's len(c) == 1
    if (typeof c !== "string" || [...c].length !== 1) bad(`chars[${i}]: a vocabulary entry must be one character, not ${show(c)}`);
    if (ids.has(c)) bad(`chars[${i}]: the character ${show(c)} is listed twice`);
    ids.set(c, i);
  });
  if (!Number.isInteger(v.block) || v.block < 1 || v.block > MAX_BLOCK) {
    bad(`'block' must be the longest context (a whole number 1 to ${MAX_BLOCK}), not ${show(v.block)}`);
  }
  if (v.chars.length !== logits[2]) bad(`${v.chars.length} characters, but the model's logits score ${show(logits[2])} tokens`);
  return { chars: v.chars.slice(), ids, block: v.block };
}

/** generate()'s options checked, as dlc/generate.py checks them, with their defaults. */
function generationOptions(model, options) {
  const inputs = model.inputs;
  if (!has(inputs, "tokens") || inputs.tokens.length !== 2 || typeof inputs.tokens[1] !== "string") {
    throw new DlcError("generation feeds an input 'tokens' of shape [B, T] with T symbolic (any context length up to the block)");
  }
  if (!has(model.manifest.names, "logits") || !Array.isArray(model.tensorShapes.logits) || model.tensorShapes.logits.length !== 3) {
    throw new DlcError("generation reads a tensor 'logits' [B, T, V] of next-token logits; the model has none");
  }
  const pick = (key, fallback) => (options[key] === undefined || options[key] === null ? fallback : options[key]);
  const o = {
    tokens: pick("tokens", 100),
    temperature: pick("temperature", 1),
    topK: pick("topK", null),
    seed: pick("seed", 0),
    block: pick("block", model.vocab ? model.vocab.block : null),
    cache: pick("cache", true),
    onToken: options.onToken,
    signal: options.signal,
  };
  if (o.block === null) throw new DlcError("give block (the longest context the model takes; an export's vocabulary holds it)");
  if (!Number.isInteger(o.tokens) || o.tokens < 0 || !Number.isInteger(o.block) || o.block < 1) {
    throw new DlcError(`tokens must be a whole number >= 0 and block >= 1, not ${show(o.tokens)} and ${show(o.block)}`);
  }
  if (typeof o.temperature !== "number" || !(o.temperature >= 0) || (o.topK !== null && !(Number.isInteger(o.topK) && o.topK >= 1))) {
    throw new DlcError(`temperature must be >= 0 and topK a whole number >= 1, not ${show(o.temperature)} and ${show(o.topK)}`);
  }
  if (!Number.isSafeInteger(o.seed)) throw new DlcError(`seed must be a whole number, not ${show(o.seed)}`);
  if (typeof o.cache !== "boolean") throw new DlcError(`cache must be true or false, not ${show(o.cache)}`);
  if (o.onToken !== undefined && typeof o.onToken !== "function") throw new DlcError("onToken must be a function");
  return o;
}

/** A prompt of token ids: whole numbers, each an id of the vocabulary (0 to size - 1). */
function promptIds(prompt, size) {
  const ids = Array.from(prompt || []);
  if (!ids.length) throw new DlcError("generation needs a prompt of at least one token");
  ids.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id >= size) throw new DlcError(`prompt[${i}]: ${show(id)} is not a token id (0 to ${size - 1})`);
  });
  return ids;
}

/** murmur3's 32-bit finalizer (dlc/generate.py _mix32), in uint32 arithmetic. */
function mix32(x) {
  x >>>= 0;
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x85ebca6b) >>> 0;
  x = (x ^ (x >>> 13)) >>> 0;
  x = Math.imul(x, 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

/** A number in [0, 1) for draw `step` of `seed`: dlc/generate.py's uniform, bit for bit
 * (seed and step taken modulo 2^32, as Python's `& 0xFFFFFFFF`). */
export function uniform(seed, step) {
  return ((mix32(mix32(seed) ^ (step >>> 0)) >>> 0) >>> 8) / (1 << 24);
}

/** NumPy's sum of a float64 array (pairwise_sum: 8 accumulators, halves past 128), so the
 * threshold u * sum is the one dlc/generate.py draws against, to the last bit. */
function numpySum(a, start = 0, n = a.length) {
  if (n < 8) {
    let res = 0;
    for (let i = 0; i < n; i++) res += a[start + i];
    return res;
  }
  if (n <= 128) {
    const r = Array.from(a.subarray(start, start + 8));
    let i = 8;
    for (; i < n - (n % 8); i += 8) for (let j = 0; j < 8; j++) r[j] += a[start + i + j];
    let res = r[0] + r[1] + (r[2] + r[3]) + (r[4] + r[5] + (r[6] + r[7]));
    for (; i < n; i++) res += a[start + i];
    return res;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return numpySum(a, start, half) + numpySum(a, start + half, n - half);
}

/** One id from a row of logits and a uniform u: dlc/generate.py's sample, NaN and inf
 * included (temperature 0: the most likely one; top-k keeps the k largest; then the first id
 * whose running sum of probabilities, in float64 and id order, passes u times their sum). */
export function sample(logits, temperature, topK, u) {
  const n = logits.length;
  if (temperature === 0) {
    let best = 0; // np.argmax: the first NaN, else the first largest
    for (let i = 0; i < n; i++) {
      if (Number.isNaN(logits[i])) return i;
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  }
  let l = Float64Array.from(logits, (x) => x / temperature);
  if (topK !== null && topK !== undefined && topK < n) {
    const kth = Float64Array.from(l).sort()[n - topK]; // ascending, NaN last: np.sort
    l = l.map((x) => (x < kth ? -Infinity : x));
  }
  let max = -Infinity; // np.max: NaN if any
  for (const x of l) max = Number.isNaN(x) || Number.isNaN(max) ? NaN : Math.max(max, x);
  const p = l.map((x) => Math.exp(x - max));
  const target = u * numpySum(p);
  let total = 0;
  for (let i = 0; i < n; i++) {
    total += p[i];
    if (total > target) return i;
  }
  for (let i = n - 1; i >= 0; i--) if (p[i] !== 0) return i; // np.flatnonzero(p)[-1]
  return n - 1;
}
