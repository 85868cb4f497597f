// dlc.js: the runtime of a `dlc export --web` folder. An ES module with no dependencies and
// no build step: it loads manifest.json, the GLSL ES 3.00 shaders and weights.bin, and runs
// the compiled programs on its own offscreen WebGL2 context.
//
//   import { load } from "./dlc.js";
//   const m = await load(".");                          // the folder holding manifest.json
//   const out = await m.eval({ pixels: { data, shape: [1, 64] } }, ["probs"]);
//   const losses = await m.train(feeds, { steps: 10, batchSize: 32 });
//   const params = await m.params();                    // name -> {data, shape}
//   m.dispose();
//
// It mirrors the Python texture executor (runtime/texture_executor.py, runtime/textures.py):
// every buffer is an R32F texture laid out row-major from the flat index; a kernel is one
// full-screen pass per output; a pass never renders into a texture it reads (it renders into
// a spare that takes the slot's place after the kernel). Reads are non-blocking: readPixels
// into a pixel-pack buffer, a fence, polling it between tasks, then the copy out.

const FORMAT = 1;
const LR = "$lr"; // the learning rate, an input of the train program
const PERSISTENT = new Set(["param", "state"]);
const YIELD_EVERY = 32; // training steps queued between returns to the event loop (the page stays live)
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

// Element 0 of b0, rendered into the one texel the viewport covers (a step's loss into the
// texture collecting every step's loss: training reads them once, at the end).
const PICK = `${ES_HEADER}uniform sampler2D b0;
layout(location = 0) out float dlc_out;
void main() { dlc_out = texelFetch(b0, ivec2(0, 0), 0).r; }
`;

const SAMPLER = /^uniform (?:highp )?sampler2D b(\d+);/gm;

/** Every error dlc.js raises: a model, feed or browser problem, said in words. */
export class DlcError extends Error {
  constructor(message) {
    super(message);
    this.name = "DlcError";
  }
}

/** Load the export in folder `url` (e.g. "." or "models/digits/"); resolves to a Model.
 * options.canvas: a canvas (or OffscreenCanvas) whose WebGL2 context to use instead of one
 * of its own. */
export async function load(url = ".", options = {}) {
  const base = new URL(url.endsWith("/") ? url : url + "/", globalThis.location ? globalThis.location.href : undefined);
  const manifest = await fetchOk(new URL("manifest.json", base)).then((r) => r.json());
  if (manifest.format !== FORMAT || manifest.target !== "texture" || !manifest.web) {
    throw new DlcError(`${base}manifest.json is not a dlc web export of format ${FORMAT} (run dlc export MODEL --web DIR)`);
  }
  const web = manifest.web;
  const weights = await fetchOk(new URL(web.weights.file, base)).then((r) => r.arrayBuffer());
  if (weights.byteLength !== web.weights.bytes) {
    throw new DlcError(`${web.weights.file} holds ${weights.byteLength} bytes; the manifest says ${web.weights.bytes}`);
  }
  const files = new Set();
  for (const program of Object.values(manifest.programs)) {
    for (const k of program.kernels) for (const p of k.passes) files.add(p.file);
  }
  const sources = {};
  await Promise.all(
    [...files].map(async (file) => {
      sources[file] = await fetchOk(new URL(`${web.shaders}/${file}`, base)).then((r) => r.text());
    }),
  );
  return new Model(new Device(options.canvas), manifest, sources, weights);
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

// -- the GL side: a context, textures, programs, passes, reads ----------------------------

/** One WebGL2 context and what runs on it: float textures, programs, the pass helpers. */
class Device {
  constructor(canvas) {
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
    this.vao = gl.createVertexArray();
    this.vertex = this.shader(gl.VERTEX_SHADER, VERTEX, "dlc_vertex");
    this.textures = new Set();
    this.programs = new Set();
    this.copyProgram = this.program(COPY, "dlc_copy");
    this.pickProgram = this.program(PICK, "dlc_pick");
    this.readFormat = null; // [format, channels] readPixels takes for an R32F framebuffer
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
   * an RGBA32F one of that size (a packed texture of texture_matmul.py). */
  texture(count, what = "a tensor", size = null) {
    const gl = this.gl;
    const [width, height] = size || this.layout(count, what);
    const handle = gl.createTexture();
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

  deleteTexture(tex) {
    if (!tex || !this.textures.has(tex)) return;
    this.gl.deleteFramebuffer(tex.fbo);
    this.gl.deleteTexture(tex.handle);
    this.textures.delete(tex);
  }

  /** Write `data` (a Float32Array) at the start of `tex`: whole rows, then the last partial row. */
  upload(tex, data) {
    const gl = this.gl;
    if (data.length > tex.count) throw new DlcError(`internal dlc error: ${data.length} floats into a texture of ${tex.count}`);
    gl.bindTexture(gl.TEXTURE_2D, tex.handle);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 4);
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

  /** A linked full-screen-triangle program around one fragment shader; sampler b<k> reads unit k. */
  program(source, name) {
    const gl = this.gl;
    const frag = this.shader(gl.FRAGMENT_SHADER, source, name);
    const handle = gl.createProgram();
    gl.attachShader(handle, this.vertex);
    gl.attachShader(handle, frag);
    gl.linkProgram(handle);
    gl.detachShader(handle, frag);
    gl.deleteShader(frag);
    if (!gl.getProgramParameter(handle, gl.LINK_STATUS)) {
      throw new DlcError(`internal dlc error: the shader '${name}' does not link: ${gl.getProgramInfoLog(handle)}`);
    }
    const units = [...source.matchAll(SAMPLER)].map((m) => Number(m[1]));
    gl.useProgram(handle);
    for (const unit of units) gl.uniform1i(gl.getUniformLocation(handle, `b${unit}`), unit);
    const program = { handle, name, units, locations: new Map() };
    this.programs.add(program);
    return program;
  }

  location(program, name) {
    let loc = program.locations.get(name);
    if (loc === undefined) {
      loc = this.gl.getUniformLocation(program.handle, name);
      program.locations.set(name, loc);
    }
    return loc;
  }

  /** Run `program` over every texel of `target` (or only the texel `at`, a flat index):
   * samplers maps a unit to the texture it reads; ints sets int uniforms. */
  pass(program, target, samplers, ints, at = null) {
    const gl = this.gl;
    for (const tex of samplers.values()) {
      if (tex === target) throw new DlcError(`internal dlc error: pass '${program.name}' reads the texture it writes`);
    }
    gl.useProgram(program.handle);
    for (const [unit, tex] of samplers) {
      if (unit >= this.maxUnits) {
        throw new DlcError(`kernel pass '${program.name}' reads ${unit + 1} textures; this GPU's fragment shaders read at most ${this.maxUnits}`);
      }
      gl.activeTexture(gl.TEXTURE0 + unit);
      gl.bindTexture(gl.TEXTURE_2D, tex.handle);
    }
    for (const [name, value] of Object.entries(ints)) {
      const loc = this.location(program, name);
      if (loc !== null) gl.uniform1i(loc, value);
    }
    gl.bindFramebuffer(gl.FRAMEBUFFER, target.fbo);
    if (at === null) gl.viewport(0, 0, target.width, target.height);
    else gl.viewport(at % target.width, Math.floor(at / target.width), 1, 1);
    gl.bindVertexArray(this.vao);
    gl.drawArrays(gl.TRIANGLES, 0, 3);
  }

  /** Copy the first `count` floats of `src` into `dst`. */
  copy(dst, src, count = src.count) {
    this.pass(this.copyProgram, dst, new Map([[0, src]]), { dlc_width: dst.width, dlc_count: count });
  }

  /** Element 0 of `src` into element `at` of `dst`. */
  pick(dst, at, src) {
    this.pass(this.pickProgram, dst, new Map([[0, src]]), {}, at);
  }

  /** The first floats of each texture: reads = [[tex, count], ...] -> Float32Arrays. One fence
   * for all of them; the wait yields to the event loop instead of blocking it. */
  async read(reads) {
    const gl = this.gl;
    const [format, channels] = this.pickReadFormat(reads.length ? reads[0][0] : null);
    const pending = [];
    for (const [tex, count] of reads) {
      const rows = count ? Math.ceil(count / tex.width) : 0;
      const floats = rows * tex.width * channels;
      const buffer = gl.createBuffer();
      gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
      gl.bufferData(gl.PIXEL_PACK_BUFFER, Math.max(floats, 1) * 4, gl.STREAM_READ);
      if (rows) {
        gl.bindFramebuffer(gl.FRAMEBUFFER, tex.fbo);
        gl.readPixels(0, 0, tex.width, rows, format, gl.FLOAT, 0);
      }
      pending.push({ buffer, floats, count });
    }
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
    const sync = gl.fenceSync(gl.SYNC_GPU_COMMANDS_COMPLETE, 0);
    gl.flush();
    try {
      await waitFor(gl, sync);
    } finally {
      gl.deleteSync(sync);
    }
    return pending.map(({ buffer, floats, count }) => {
      const all = new Float32Array(floats);
      gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
      if (floats) gl.getBufferSubData(gl.PIXEL_PACK_BUFFER, 0, all);
      gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
      gl.deleteBuffer(buffer);
      if (channels === 1) return all.subarray(0, count);
      const out = new Float32Array(count);
      for (let i = 0; i < count; i++) out[i] = all[i * channels];
      return out;
    });
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
    for (const program of this.programs) gl.deleteProgram(program.handle);
    this.programs.clear();
    gl.deleteShader(this.vertex);
    gl.deleteVertexArray(this.vao);
    const lose = gl.getExtension("WEBGL_lose_context");
    if (lose) lose.loseContext();
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

/** Check `feeds` (name -> {data, shape}) against the model's inputs; return the Float32Array
 * of each fed input in `needed` and the dims they bind. Feeds the model does not have are
 * refused; inputs it has but does not need here are ignored. */
function checkFeeds(inputs, feeds, needed) {
  const arrays = {};
  const dims = {};
  const boundBy = {};
  for (const [name, feed] of Object.entries(feeds || {})) {
    if (!(name in inputs)) {
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
    const data = feed.data instanceof Float32Array ? feed.data : Float32Array.from(feed.data);
    if (data.length !== product(shape)) {
      throw new DlcError(`input '${name}': shape ${showShape(shape)} holds ${product(shape)} values, its data has ${data.length}`);
    }
    declared.forEach((d, axis) => {
      if (typeof d === "number" && d !== shape[axis]) {
        throw new DlcError(`input '${name}' is declared ${showShape(declared)} but fed shape ${showShape(shape)} (axis ${axis})`);
      }
      if (typeof d === "string" && !isProduct(d)) {
        if (d in dims && dims[d] !== shape[axis]) {
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
    if (name !== LR && !(name in arrays)) throw new DlcError(`input '${name}' is missing`);
  }
  return { arrays, dims };
}

// -- programs ---------------------------------------------------------------------------------

/** Params and optimizer state as textures by name (shared by the eval and train programs). */
class Store {
  constructor(device, leaves, weights) {
    this.device = device;
    this.buffers = new Map();
    this.shapes = new Map();
    for (const [name, leaf] of Object.entries(leaves)) {
      const tex = device.texture(leaf.count, `'${name}' ${showShape(leaf.shape)}`);
      device.upload(tex, new Float32Array(weights, leaf.offset, leaf.count));
      this.buffers.set(name, tex);
      this.shapes.set(name, leaf.shape);
    }
  }

  buffer(name) {
    const tex = this.buffers.get(name);
    if (!tex) throw new DlcError(`internal dlc error: no stored param or state '${name}'`);
    return tex;
  }

  /** Put `tex` in place of leaf `name`'s texture; return the old one. */
  replace(name, tex) {
    const old = this.buffer(name);
    this.buffers.set(name, tex);
    return old;
  }

  /** Copies of every leaf (to put back with restore). */
  snapshot() {
    const copies = new Map();
    for (const [name, tex] of this.buffers) {
      const copy = this.device.texture(tex.count);
      this.device.copy(copy, tex);
      copies.set(name, copy);
    }
    return copies;
  }

  restore(copies) {
    for (const [name, copy] of copies) this.device.deleteTexture(this.replace(name, copy));
  }

  drop(copies) {
    for (const copy of copies.values()) this.device.deleteTexture(copy);
  }
}

/** Runs one compiled program spec (manifest.programs.eval or .train) against the Store. */
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
    this.programs = this.kernels.map((k) => k.passes.map((p) => device.program(sources[p.file], `${k.name}:${p.tensor}`)));
    this.buffers = new Map(); // slot -> texture (temps, inputs, consts)
    this.scratch = new Map(); // kernel -> its partial results (split reductions)
    this.packedSize = new Map(); // "kernel:unit" -> [width, height] of a packed texture
    this.packed = new Map(); // "width x height" -> free packed textures (live only while their kernel runs)
    this.spare = new Map(); // "width x height" -> textures to render into
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
      if (slot.kind === "input" && slot.name in arrays) this.device.upload(this.buffers.get(s), arrays[slot.name]);
    });
  }

  launch(kernels) {
    const device = this.device;
    for (const k of kernels) {
      const spec = this.kernels[k];
      const samplers = new Map(spec.slots.map((s, unit) => [unit, this.slotBuffer(s)]));
      if (spec.scratch) samplers.set(spec.scratch.unit, this.scratch.get(k));
      const packed = (spec.packed || []).map((q) => {
        const tex = this.takePacked(this.packedSize.get(`${k}:${q.unit}`));
        samplers.set(q.unit, tex);
        return tex;
      });
      const read = new Set(spec.reads.map((t) => this.tensors.get(t).slot));
      const ints = {};
      for (const [u, d] of Object.entries(spec.uniforms)) ints[u] = this.dims[d];
      const swaps = [];
      spec.passes.forEach((p, i) => {
        const program = this.programs[k][i];
        const used = new Map(program.units.map((u) => [u, samplers.get(u)]));
        let target;
        if (p.into !== undefined && p.into !== null) target = samplers.get(p.into); // a packed texture
        else if (p.tensor === null) target = this.scratch.get(k); // a split reduction's partials
        else {
          const s = this.tensors.get(p.tensor).slot;
          target = this.slotBuffer(s);
          if (read.has(s)) {
            target = this.takeSpare(target);
            swaps.push([s, target]);
          }
        }
        device.pass(program, target, used, { ...ints, dlc_width: target.width });
      });
      for (const tex of packed) this.packed.get(`${tex.width}x${tex.height}`).push(tex);
      for (const [s, tex] of swaps) {
        const slot = this.slots[s];
        let old;
        if (PERSISTENT.has(slot.kind)) old = this.store.replace(slot.name, tex);
        else {
          old = this.buffers.get(s);
          this.buffers.set(s, tex);
        }
        const key = `${old.width}x${old.height}`;
        if (!this.spare.has(key)) this.spare.set(key, []);
        this.spare.get(key).push(old);
      }
    }
  }

  takePacked([width, height]) {
    const key = `${width}x${height}`;
    if (!this.packed.has(key)) this.packed.set(key, []);
    const pool = this.packed.get(key);
    return pool.length ? pool.pop() : this.device.texture(width * height, "a packed texture", [width, height]);
  }

  takeSpare(like) {
    const pool = this.spare.get(`${like.width}x${like.height}`);
    return pool && pool.length ? pool.pop() : this.device.texture(like.count);
  }

  /** After a training step: the updated params and state into the store. */
  applyCopies() {
    for (const c of this.spec.copies) {
      const info = this.tensors.get(c.tensor);
      this.device.copy(this.store.buffer(c.target), this.slotBuffer(info.slot), product(bindShape(info.shape, this.dims)));
    }
  }

  /** [texture, count, shape] of tensor `t` under the current dims. */
  where(t) {
    const info = this.tensors.get(t);
    const shape = bindShape(info.shape, this.dims);
    return [this.slotBuffer(info.slot), product(shape), shape];
  }
}

/** A loaded export: eval, train, params, dispose. */
class Model {
  constructor(device, manifest, sources, weights) {
    this.device = device;
    this.manifest = manifest;
    this.sources = sources;
    this.inputs = manifest.inputs; // name -> declared shape (dim names for symbolic dims)
    this.paramShapes = manifest.params;
    this.tensorShapes = manifest.tensors;
    this.losses = manifest.losses;
    this.store = new Store(device, manifest.web.weights.leaves, weights);
    this.executors = new Map();
    this.disposed = false;
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
    const ex = this.executor("eval");
    const tensors = names.map((n) => {
      if (!(n in this.manifest.names)) {
        throw new DlcError(`no tensor named '${n}' in the model (it has: ${Object.keys(this.manifest.names).join(", ")})`);
      }
      return this.manifest.names[n];
    });
    const { kernels, names: needed } = ex.needs(tensors);
    const { arrays, dims } = checkFeeds(this.inputs, feeds, needed);
    ex.prepare(this.allDims(ex, kernels, tensors, dims));
    ex.upload(arrays);
    ex.launch(kernels);
    const where = tensors.map((t) => ex.where(t));
    const values = await this.device.read(where.map(([tex, count]) => [tex, count]));
    return Object.fromEntries(names.map((n, i) => [n, { data: values[i], shape: where[i][2] }]));
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
      if (!(d in dims)) {
        const binders = Object.keys(this.inputs).filter((n) => this.inputs[n].includes(d));
        throw new DlcError(`fetching these tensors needs the dim ${d}: feed ${binders.map((n) => `'${n}'`).join(" or ")}, which binds it`);
      }
    }
    const all = { ...dims };
    for (const shape of Object.values(this.inputs)) for (const d of shape) for (const s of symbols(d)) if (!(s in all)) all[s] = 1;
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
    const { arrays, dims } = checkFeeds(this.inputs, feeds, needed);
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
    let before = this.store.snapshot();
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
      const [values] = await device.read([[losses, total]]);
      const bad = values.findIndex((v) => !Number.isFinite(v));
      if (bad >= 0) {
        this.store.restore(before);
        before = null; // restored: those textures are the params now
        throw new DlcError(`training diverged: step ${bad + 1} has loss ${values[bad]}; the params are back as they were before train()`);
      }
      return Array.from(values);
    } finally {
      if (before) this.store.drop(before);
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

  /** Free every texture and program, and the context. */
  dispose() {
    if (this.disposed) return;
    this.disposed = true;
    this.device.dispose();
    this.executors.clear();
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
