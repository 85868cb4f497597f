"""GLSL rendering shared by every kernel template, of every GLSL target.

A kernel is rendered from its fused IR by an `Emitter`, which evaluates a node at an index
into a GLSL temporary: elementwise ops by the registry's GLSL expression, layout ops as index
maps (index.py: reshape keeps the flat index, transpose permutes coordinates, pad and concat
select, take and gather read the row their index names), stored tensors as loads. An i32
value is held as its bits in a float (`intBitsToFloat`) and read through `number` or
`integer` where an op computes with it. Results are cached per
(node, index), so a value used twice is computed once. Indexes are `Ix` values: a flat index,
coordinates, or both. What differs between targets (loads, stores, the invocation's own
element, the version line) the Emitter asks its context's renderer (renderer.py); each
target's header is its own (compute.py, fragment.py).

Naming: buffers are `b<binding>` (one per storage slot), symbolic dims are `dim<k>` int
uniforms, temporaries are `n<node>`: no user name reaches GLSL except inside comments, and
comments are reduced to printable ASCII.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dlc.runtime import dims as dim_algebra

from .. import registry
from ..dtypes import I32, INT_LOWERING
from ..fusion import Fusion, Kernel
from ..ir import Graph, Shape, format_node
from ..plan import Plan, Size, size_of
from . import index
from .index import Ix, add, mul, numel_known
from .renderer import COMPUTE, Renderer, float_lit

__all__ = ["Ix", "add", "float_lit", "mul", "numel_known"]  # re-exported for the templates

LOCAL = 256  # invocations per work group for one-thread-per-element kernels

PREAMBLE = """\
#define DLC_INF uintBitsToFloat(0x7F800000u)
#define DLC_NAN uintBitsToFloat(0x7FC00000u)

// NaN tests and NaN-propagating max/min with NumPy's meaning. GLSL leaves max/min/clamp of a
// NaN undefined (llvmpipe returns the other operand), and a driver compiling with fast-math
// may fold isnan() away: the exponent and mantissa bits of a NaN survive any float rewrite.
bool dlc_isnan(float x) { return (floatBitsToUint(x) & 0x7FFFFFFFu) > 0x7F800000u; }
// Neither inf nor NaN (a reduction's sum that overflowed takes its scaled path).
bool dlc_isfinite(float x) { return (floatBitsToUint(x) & 0x7F800000u) != 0x7F800000u; }
// x * 2^-32 (below 2^-94: a signed 0), inf and NaN kept, on the exponent's bits: a sum of
// x_i * 2^-32 would be rewritten as (sum of x_i) * 2^-32 by optimizers (Mesa's), overflowing.
float dlc_down32(float x) {
    uint b = floatBitsToUint(x), e = b & 0x7F800000u;
    return e == 0x7F800000u ? x : e > 0x10000000u ? uintBitsToFloat(b - 0x10000000u) : uintBitsToFloat(b & 0x80000000u);
}
bool dlc_unordered(float a, float b) { return dlc_isnan(a) || dlc_isnan(b); }
// np.maximum / np.minimum: a NaN operand wins; on a tie (0 against -0) the second operand.
float dlc_max(float a, float b) { return dlc_isnan(b) ? b : (a > b || dlc_isnan(a)) ? a : b; }
float dlc_min(float a, float b) { return dlc_isnan(b) ? b : (a < b || dlc_isnan(a)) ? a : b; }
// np.clip(x, 0, 6): NaN stays NaN, -0 stays -0.
float dlc_relu6(float x) { return dlc_isnan(x) ? x : x < 0.0 ? 0.0 : x > 6.0 ? 6.0 : x; }
float dlc_exp(float x) { return dlc_isnan(x) ? x : exp(x); }  // llvmpipe: exp(NaN) may be 1

// log2 |x|, a subnormal x's from its bits (log2 of its mantissa - 149): exact where a GPU
// flushes subnormal operands to 0 (and where llvmpipe's log2 misreads them).
float dlc_log2_abs(float x) {
    uint b = floatBitsToUint(x) & 0x7FFFFFFFu;
    return b - 1u < 0x7FFFFFu ? log2(float(b)) - 149.0 : log2(abs(x));
}

// x^y as NumPy's float32 power (C99 powf): x^0 = 1 and 1^y = 1 even for NaN; signed zeros and
// infinities by the parity of an integer exponent; a negative base with a fractional one: NaN.
// x's zero and sign tests read its bits: a GPU flushing subnormals would call 1e-40 zero.
float dlc_pow(float x, float y) {
    if (y == 0.0 || x == 1.0) return 1.0;
    if (dlc_unordered(x, y)) return DLC_NAN;
    if (y == 1.0) return x;
    if (y == 2.0) return x * x;
    float ay = abs(y);
    bool odd = ay < 16777216.0 && mod(ay, 2.0) == 1.0;  // every float from 2^24 up is even
    uint sign_x = floatBitsToUint(x) & 0x80000000u;
    if (ay == DLC_INF) {
        if (x == -1.0) return 1.0;
        return (y > 0.0) == (abs(x) > 1.0) ? DLC_INF : 0.0;
    }
    if ((floatBitsToUint(x) & 0x7FFFFFFFu) == 0u) {  // +0 or -0: the sign survives odd exponents
        if (y > 0.0) return odd ? x : 0.0;
        return odd ? uintBitsToFloat(sign_x | 0x7F800000u) : DLC_INF;
    }
    if (abs(x) == DLC_INF) {
        if (x > 0.0) return y > 0.0 ? DLC_INF : 0.0;
        if (y > 0.0) return odd ? -DLC_INF : DLC_INF;
        return odd ? uintBitsToFloat(0x80000000u) : 0.0;
    }
    float r = exp2(y * dlc_log2_abs(x));
    if (sign_x == 0u) return r;
    if (floor(y) != y) return DLC_NAN;
    return odd ? -r : r;
}

// tanh from one exp: (1 - e^-2a) / (1 + e^-2a), a = |x|, with its series near 0 where that
// cancels (drivers' builtin tanh can cost several times the memory traffic of a kernel).
float dlc_tanh(float x) {
    float a = abs(x);
    if (x == 0.0) return x;  // keeps -0 (NVIDIA's optimizer drops the sign through the series)
    if (a < 0.125) {
        float x2 = x * x;
        return x * (1.0 + x2 * (-0.33333333 + x2 * (0.13333333 + x2 * (-0.053968254
                                                                     + x2 * 0.021869488))));
    }
    if (dlc_isnan(x)) return x;
    float e = exp(-2.0 * min(a, 15.0));
    return sign(x) * ((1.0 - e) / (1.0 + e));
}

// 1 / (1 + exp(-x)) without overflowing exp for large |x|; NaN stays NaN.
float dlc_sigmoid(float x) {
    if (dlc_isnan(x)) return x;
    float e = exp(-abs(x));
    return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
""" + registry.glsl_helpers()  # the helpers registry entries bring (dlc_erf, ...)


# -- the preamble, pruned per kernel ------------------------------------------------------
# A kernel carries only the helpers of PREAMBLE it uses (and those they use). PREAMBLE stays
# one text; it is split here into named parts: a `#define NAME`, or a function `dlc_xxx`
# with the comment lines above it. A part without a name is always kept.

_DEFINE = re.compile(r"#define\s+(\w+)")
_FUNCTION = re.compile(r"^\w[\w\s]*?\b(\w+)\s*\(")  # a definition, on one line or several


@functools.lru_cache(maxsize=4)
def preamble_parts(text: str = PREAMBLE) -> tuple[tuple[str | None, str], ...]:
    """(name, text) of each helper of a preamble, in order."""
    parts: list[tuple[str | None, str]] = []
    pending: list[str] = []  # comments and blank lines: they go with the next part
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            pending.append(line)
            k += 1
            continue
        define, function = _DEFINE.match(stripped), _FUNCTION.match(line)
        body = [line]
        if function and not define:
            depth = line.count("{") - line.count("}")
            opened = "{" in line
            while (depth > 0 or not opened) and k + 1 < len(lines):
                k += 1
                body.append(lines[k])
                depth += lines[k].count("{") - lines[k].count("}")
                opened = opened or "{" in lines[k]
        name = define[1] if define else function[1] if function else None
        parts.append((name, "\n".join(pending + body)))
        pending = []
        k += 1
    if pending:
        parts.append((None, "\n".join(pending)))
    return tuple(parts)


_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=4)
def _part_words(text: str) -> dict[str, frozenset[str]]:
    """Each name of a part of preamble `text` -> the words its text (all parts of that name) uses."""
    words: dict[str, frozenset[str]] = {}
    for n, t in preamble_parts(text):
        if n:
            words[n] = words.get(n, frozenset()) | frozenset(_WORD.findall(t))
    return words


def pruned_preamble(body: str, text: str = PREAMBLE) -> str:
    """The parts of `text` that `body` uses, directly or through another part."""
    parts = preamble_parts(text)
    words = _part_words(text)
    needed: set[str] = set()
    # A part is used where its name is a whole word (`\bNAME\b`): one scan of the body into
    # its words, not one regex search of the body per part (this ran per kernel).
    reach = set(_WORD.findall(body))
    while True:
        more = {n for n in words if n not in needed and n in reach}
        if not more:
            break
        needed |= more
        reach = set().union(*(words[n] for n in more))
    kept = [t for n, t in parts if n is None or n in needed]
    return "\n".join(kept).strip("\n") + "\n" if any(n in needed for n, _ in parts) else ""


def prune_preamble(source: str) -> str:
    """A kernel's source with its copy of PREAMBLE cut down to the helpers it uses."""
    at = source.find(PREAMBLE)
    if at < 0:
        return source
    body = source[:at] + source[at + len(PREAMBLE) :]
    return source[:at] + pruned_preamble(body) + source[at + len(PREAMBLE) :]


_UNSAFE = re.compile(r"[^ -~]|\\")


def comment(text: str) -> str:
    """Text made safe for a `//` comment: printable ASCII, no backslash (line splice)."""
    return _UNSAFE.sub("?", text)


class NotVectorizable(Exception):
    """A vec4 rendering met an access that is not element for element."""


VEC = "@vec"  # the flat index of a vec4 kernel's own element (a marker, never printed)


class Names:
    """GLSL names taken in one kernel; `claim` gives `stem`, or `stem_<k>` once taken."""

    def __init__(self, taken: Sequence[str] = ()) -> None:
        self.taken: set[str] = set(taken)
        self.count = 0

    def claim(self, stem: str) -> str:
        name = stem
        while name in self.taken:
            self.count += 1
            name = f"{stem}_{self.count}"
        self.taken.add(name)
        return name


@dataclass
class Context:
    """What one kernel's templates share: graph, bindings, symbolic dims in use."""

    fusion: Fusion
    plan: Plan
    kernel: Kernel
    dim_index: Mapping[str, int]  # program-wide: symbolic dim -> k of uniform dim<k>
    binding: dict[int, int] = field(default_factory=dict)  # slot -> binding
    read_slots: set[int] = field(default_factory=set)
    write_slots: set[int] = field(default_factory=set)
    dims_used: set[str] = field(default_factory=set)
    vec_slots: set[int] = field(default_factory=set)  # slots declared as vec4 arrays
    names: Names = field(default_factory=Names)
    # Debug mode: every value the kernel computes is tested for NaN, and a NaN sets its node's
    # flag in buffer `dlc_nan` (bound after the slots): node -> flag index.
    nan_check: bool = False
    nan_flags: dict[int, int] = field(default_factory=dict)
    scratch_buffers: int = 0  # buffers a template binds after the slots (a split reduction's)

    scalars_used: dict[str, str] = field(default_factory=dict)  # uniform -> input name
    renderer: Renderer = COMPUTE  # the target: how to load, store, find the own element
    keys: tuple[str, ...] = ("glsl-compute",)  # the target's lowering keys in the registry (target.py)

    def __post_init__(self) -> None:
        self.nan_flags = {}
        for t in (*self.kernel.inputs, *self.kernel.outputs):
            if self.is_uniform_input(t):  # read as a uniform float, no buffer
                continue
            s = self.plan.slot_of[t]
            self.binding.setdefault(s, len(self.binding))
        self.read_slots = {self.plan.slot_of[t] for t in self.kernel.inputs}
        self.write_slots = {self.plan.slot_of[t] for t in self.kernel.outputs}

    @property
    def graph(self) -> Graph:
        return self.fusion.graph

    def buf(self, tensor: int) -> str:
        return f"b{self.binding[self.plan.slot_of[tensor]]}"

    def is_uniform_input(self, tensor: int) -> bool:
        """An input marked `uniform` (an eager op's Python number): a float uniform, not a buffer."""
        node = self.graph.nodes[tensor]
        return node.op == "input" and bool(node.attr("uniform"))

    def scalar(self, tensor: int) -> str:
        """The uniform holding input `tensor` (see `is_uniform_input`)."""
        name = f"scalar{tensor}"
        self.scalars_used[name] = self.graph.nodes[tensor].attr("name")
        return name

    def dim(self, d: int | str) -> str:
        """A dim as GLSL: an int, a symbol's uniform, or a product of them (`B*T`)."""
        known, syms = dim_algebra.factors(d)
        self.dims_used.update(syms)
        return index.mul(str(known), *(f"dim{self.dim_index[s]}" for s in syms))

    def numel(self, shape: Shape | Size) -> str:
        return index.numel(shape, self.dim)

    def load(self, buf: str, at: str) -> str:
        """Element `at` (a flat int expression) of the stored tensor `buf` on this target."""
        return self.renderer.load(buf, at)

    @functools.cached_property
    def ir_lines(self) -> tuple[str, ...]:
        """The IR each of the kernel's nodes implements, as text (header comment and manifest)."""
        return tuple(format_node(self.graph, n, locs=False) for n in self.kernel.nodes)


class Emitter:
    """Straight-line GLSL for values of IR nodes at indexes, with per-scope caching.

    `anchor_value` stands for the kernel's anchor (matmul / reduce / window result) in an
    epilogue; `vec_component` (x, y, z or w) renders one lane of a vec4 kernel.
    """

    def __init__(
        self, ctx: Context, indent: int = 1, anchor_value: str | None = None, vec_component: str | None = None
    ):
        self.ctx = ctx
        self.g = ctx.graph
        self.lines: list[str] = []
        self.indent = indent
        self.scopes: list[dict] = [{}]
        self.anchor_value = anchor_value
        self.vec_component = vec_component
        self.names = ctx.names
        self.inside = set(ctx.kernel.nodes)

    # -- lines and scopes ---------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def open(self, header: str) -> None:
        """`header {` (a bare block where header is ""), and a scope for its values."""
        self.line(f"{header} {{" if header else "{")
        self.indent += 1
        self.scopes.append({})

    def close(self) -> None:
        self.indent -= 1
        self.scopes.pop()
        self.line("}")

    def cached(self, key) -> str | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def bind(self, key, stem: str, expr: str, type_: str = "float", outer: bool = False) -> str:
        """Emit `type stem = expr;` once per key (names stay unique across the kernel)."""
        name = self.names.claim(stem)
        self.line(f"{type_} {name} = {expr};")
        (self.scopes[0] if outer else self.scopes[-1])[key] = name
        return name

    # -- indexes ------------------------------------------------------------------------
    def coords(self, ix: Ix, shape: Shape) -> tuple[str, ...]:
        """The coordinates of `ix` in a tensor of `shape` (derived from the flat index)."""
        if ix.multi is not None:
            return ix.multi
        if ix.flat == VEC:
            raise NotVectorizable("coordinates of a vec4 element")
        key = ("coords", ix.flat, tuple(shape))
        found = self.cached(key)
        if found is not None:
            return found
        out: list[str] = []
        stem = ix.flat if ix.flat.isidentifier() else "c"
        for k, expr in enumerate(index.coord_exprs(ix.flat, shape, self.ctx.dim, self.ctx.renderer.shifts)):
            if expr == "0":
                out.append(expr)
                continue
            name = self.names.claim(f"{stem}{k}")
            self.line(f"int {name} = {expr};")
            out.append(name)
        result = tuple(out)
        self.scopes[-1][key] = result
        return result

    def flat(self, ix: Ix, shape: Shape) -> str:
        """The flat position of `ix` in a tensor of `shape`."""
        if ix.flat is not None:
            return ix.flat
        return index.flat_of(ix.multi, shape, self.ctx.dim)

    def broadcast(self, ix: Ix, out: Shape, shape: Shape) -> Ix:
        """The index into an operand of `shape` broadcast (NumPy rules) to `out`."""
        if tuple(shape) == tuple(out):
            return ix
        if numel_known(shape) == 1:
            return Ix(flat="0")
        return Ix(multi=index.broadcast_coords(self.coords(ix, out), out, shape))

    # -- values -------------------------------------------------------------------------
    def value(self, n: int, ix: Ix) -> str:
        key = ("v", n, self.vec_component, ix.key())
        found = self.cached(key)
        if found is not None:
            return found
        if not getattr(self, "_warming", False):
            self._warm_deep_chain(n, ix)
        node = self.g.nodes[n]
        if n in self.ctx.fusion.literals:
            return float_lit(node.attr("value")[0])
        if n == self.ctx.kernel.anchor and self.anchor_value is not None:
            self.flag_nan(n, self.anchor_value)
            return self.anchor_value
        if n not in self.inside:
            return self.load(n, ix)
        op = registry.get(node.op)
        if op.kind == "elementwise":
            expr = self._elementwise(n, ix)
        elif op.kind == "layout":
            expr = op.lower(self.ctx.keys)(self, n, ix)
        else:
            raise AssertionError(f"{node.op} node %{n} cannot be evaluated inline")
        name = self.bind(key, f"n{n}", expr)
        self.flag_nan(n, name)
        return name

    def flag_nan(self, n: int, value: str) -> None:
        """Debug mode: set node n's flag when `value` (its value here) is NaN, so a NaN that a
        later op of the kernel hides (`where(c, sqrt(x), 0)`, `x * 0`) is still seen."""
        if not self.ctx.nan_check or self.g.dtypes[n] == I32:  # an id's bits may look like NaN
            return
        key = ("nan", n, value)
        if self.cached(key) is not None:
            return
        flag = self.ctx.nan_flags.setdefault(n, len(self.ctx.nan_flags))
        self.line(f"if (dlc_isnan({value})) dlc_nan.f[{flag}] = 1.0;")
        self.scopes[-1][key] = value

    def _warm_deep_chain(self, n: int, ix: Ix, deep: int = 200) -> None:
        """A chain of thousands of inline elementwise ops (a 1000-term sum) would recurse past
        Python's limit in value(): evaluate it bottom up first, in the order the recursion
        would (so the same GLSL), and value() then finds each operand cached."""
        post, seen, stack, depth = [], set(), [(n, ix, False, 0)], 0
        while stack:
            m, mix, expanded, d = stack.pop()
            if expanded:
                post.append((m, mix))
                continue
            node = self.g.nodes[m]
            if (
                (m, mix.key()) in seen
                or m not in self.inside
                or m in self.ctx.fusion.literals
                or (m == self.ctx.kernel.anchor and self.anchor_value is not None)
                or registry.get(node.op).kind != "elementwise"
                or node.op == "dim_size"
            ):
                continue
            seen.add((m, mix.key()))
            depth = max(depth, d)
            stack.append((m, mix, True, d))
            stack.extend(
                (j, self.broadcast(mix, node.shape, self.g.nodes[j].shape), False, d + 1) for j in reversed(node.inputs)
            )
        if depth < deep:
            return
        self._warming = True
        try:
            for m, mix in post[:-1]:  # the last is n itself, which the caller evaluates
                self.value(m, mix)
        finally:
            self._warming = False

    def load(self, n: int, ix: Ix) -> str:
        if self.ctx.is_uniform_input(n):
            return self.ctx.scalar(n)
        shape = self.g.nodes[n].shape
        buf = self.ctx.buf(n)
        if self.vec_component is not None:
            kernel_shape = self.ctx.kernel.shape
            if ix.flat == VEC and size_of(shape) == size_of(kernel_shape):
                vec_key = ("vec", n)
                vec = self.cached(vec_key) or self.bind(vec_key, f"n{n}", f"{buf}.v[i4]", "vec4", outer=True)
                self.ctx.vec_slots.add(self.ctx.plan.slot_of[n])
                return f"{vec}.{self.vec_component}"
            if numel_known(shape) != 1:
                raise NotVectorizable(f"%{n} is not read element for element")
            key = ("s", n)
            return self.cached(key) or self.bind(key, f"n{n}", f"{buf}.v[0]", outer=True)
        key = ("v", n, None, ix.key())
        return self.bind(key, f"n{n}", self.ctx.load(buf, self.flat(ix, shape)))

    def _elementwise(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        op = registry.get(node.op)
        if node.op == "dim_size":
            return f"float({self.ctx.numel(node.attr('dims'))})"
        at = [self.broadcast(ix, node.shape, self.g.nodes[j].shape) for j in node.inputs]
        int_glsl = op.lowering.get(INT_LOWERING)
        if int_glsl and all(self.g.dtypes[j] == I32 for j in node.inputs):  # ints, exactly
            return self.ctx.renderer.op(node.op, int_glsl, [self.integer(j, a) for j, a in zip(node.inputs, at)])
        args = [self.number(j, a) for j, a in zip(node.inputs, at)]
        expr = self.ctx.renderer.op(node.op, op.lower(self.ctx.keys), args, node.attrs)
        if "{index}" in expr:  # an op that depends on its element's position (the random ops)
            if ix.flat == VEC:
                raise NotVectorizable(f"{node.op} reads its element's index")
            expr = expr.replace("{index}", self.flat(ix, node.shape))
        if "{" in expr:
            raise AssertionError(f"{node.op} node %{n} lacks an attr its GLSL needs: {op.glsl}")
        return expr

    # i32 values are held as their bits in a float (dtypes.py): read them through these
    def number(self, n: int, ix: Ix) -> str:
        """Node n's value at ix as a float number (an i32 id converted to its value)."""
        v = self.value(n, ix)
        return f"float(floatBitsToInt({v}))" if self.g.dtypes[n] == I32 else v

    def integer(self, n: int, ix: Ix) -> str:
        """Node n's value at ix as a GLSL int (an i32 node's bits)."""
        return f"floatBitsToInt({self.value(n, ix)})"

    def clamped_row(self, n: int, ix: Ix, rows: int | str) -> str:
        """The i32 index node n holds at ix, clamped into [0, rows): never a read past a buffer."""
        i = self.integer(n, ix)
        key = ("row", i, rows)
        return self.cached(key) or self.bind(key, f"n{n}row", f"clamp({i}, 0, {self.ctx.dim(rows)} - 1)", "int")

    # layout ops: each maps this node's index to its input's, then reads the input there (the
    # registry's lowering of each: INDEX_MAPS below)
    def _reshape(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src = node.inputs[0]
        if ix.multi is not None:  # coordinates in: map them group by group where the axes allow
            at = index.reshape_coords(
                ix.multi, node.shape, self.g.nodes[src].shape, self.ctx.dim, self.ctx.renderer.shifts
            )
            if at is not None:
                return self.value(src, Ix(multi=at))
        return self.value(src, Ix(flat=self.flat(ix, node.shape)))

    def _broadcast_to(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src = node.inputs[0]
        return self.value(src, self.broadcast(ix, node.shape, self.g.nodes[src].shape))

    def _transpose(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src = index.transpose_coords(self.coords(ix, node.shape), node.attr("perm"))
        return self.value(node.inputs[0], Ix(multi=src))

    def _slice(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src = index.slice_coords(self.coords(ix, node.shape), node.attr("begin"))
        return self.value(node.inputs[0], Ix(multi=src))

    def _pad(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src = node.inputs[0]
        shape = self.g.nodes[src].shape
        c = self.coords(ix, node.shape)
        coords, inside = index.pad_coords(c, node.attr("before"), node.attr("after"), shape, self.ctx.dim)
        if not inside:
            return self.value(src, Ix(multi=coords))
        # the input read only inside (a sum of pads, a split's gradient, reads one input an
        # element, not every one)
        out = self.names.claim(f"n{n}pad")
        self.line(f"float {out} = 0.0;")
        self.open(f"if ({' && '.join(inside)})")
        self.line(f"{out} = {self.value(src, Ix(multi=coords))};")
        self.close()
        return out

    def _concat(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        axis = node.attr("axis")
        c = self.coords(ix, node.shape)
        sizes = [self.g.nodes[j].shape[axis] for j in node.inputs]
        where = index.concat_parts(c, axis, sizes)
        if len(where) == 1:
            return self.value(node.inputs[0], Ix(multi=where[0][1]))
        # each input read only in its range of the axis (one read an element, not one a part)
        out = self.names.claim(f"n{n}cat")
        self.line(f"float {out};")
        branches = index.concat_branches(c[axis], [end for end, _ in where])
        for branch, j, (_, at) in zip(branches, node.inputs, where):
            self.open(branch)
            self.line(f"{out} = {self.value(j, Ix(multi=at))};")
            self.close()
        return out

    def _one_hot(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        c = self.coords(ix, node.shape)
        at = Ix(multi=c[:-1]) if len(c) > 1 else Ix(flat="0")
        if self.g.dtypes[node.inputs[0]] == I32:
            return f"({self.integer(node.inputs[0], at)} == {c[-1]} ? 1.0 : 0.0)"
        v = self.value(node.inputs[0], at)
        return f"({v} == float({c[-1]}) ? 1.0 : 0.0)"

    def _iota(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        return f"float({self.coords(ix, node.shape)[node.attr('axis')]})"

    def _take(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        src, idx = node.inputs
        c = self.coords(ix, node.shape)
        i = self.value(idx, Ix(multi=c[:1]))
        # Clamped (as a float: int() of inf or NaN is undefined), so a bad index reads the
        # nearest row rather than past the buffer; a NaN index gives NaN, as the reference.
        rows = self.ctx.dim(self.g.nodes[src].shape[0])
        key = ("row", i, rows)
        row = self.cached(key) or self.bind(
            key, f"n{n}row", f"dlc_isnan({i}) ? 0 : int(clamp({i}, 0.0, float({rows} - 1)))", "int"
        )
        return f"(dlc_isnan({i}) ? DLC_NAN : {self.value(src, Ix(multi=(row, *c[1:])))})"

    def _gather(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        table, idx = node.inputs
        axis, rank = node.attr("axis"), len(self.g.nodes[idx].shape)
        c = self.coords(ix, node.shape)
        at = Ix(multi=c[axis : axis + rank]) if rank else Ix(flat="0")
        row = self.clamped_row(idx, at, self.g.nodes[table].shape[axis])
        return self.value(table, Ix(multi=(*c[:axis], row, *c[axis + rank :])))

    def _gather_grad(self, n: int, ix: Ix) -> str:
        # This row's sum of g over the positions whose index names it, in position order: a
        # loop over the indices, no atomics (ops/integers.py).
        node = self.g.nodes[n]
        g, idx = node.inputs
        axis, idx_shape = node.attr("axis"), self.g.nodes[idx].shape
        rank = len(idx_shape)
        c = self.coords(ix, node.shape)
        acc = self.names.claim(f"n{n}")
        p = self.names.claim(f"n{n}p")
        self.line(f"float {acc} = 0.0;")
        self.open(f"for (int {p} = 0; {p} < {self.ctx.numel(idx_shape)}; ++{p})")
        row = self.clamped_row(idx, Ix(flat=p), node.shape[axis])
        self.open(f"if ({row} == {c[axis]})")
        pos = self.coords(Ix(flat=p), idx_shape) if rank else ()
        self.line(f"{acc} += {self.value(g, Ix(multi=(*c[:axis], *pos, *c[axis + 1 :])))};")
        self.close()
        self.close()
        return acc

    def _pick(self, n: int, ix: Ix) -> str:
        node = self.g.nodes[n]
        x, labels = node.inputs
        c = self.coords(ix, node.shape)
        row = self.clamped_row(labels, ix, self.g.nodes[x].shape[-1])
        return self.value(x, Ix(multi=(*c, row)))

    # -- stores -------------------------------------------------------------------------
    def store_outputs(self, ix: Ix, outputs: Sequence[int] | None = None) -> None:
        """Write every output of the kernel at its own element `ix`."""
        for o in self.ctx.kernel.outputs if outputs is None else outputs:
            v = self.value(o, ix)
            self.line(self.ctx.renderer.store(self.ctx.buf(o), self.flat(ix, self.g.nodes[o].shape), v))

    def own_element(self, var: str, count: str) -> Ix:
        """Declare `var`, this invocation's element of a one-per-element kernel, and end the
        invocation when it is past `count` elements: its index."""
        r = self.ctx.renderer
        self.line(f"int {var} = {r.global_index()};")
        self.line(r.bounds_check(var, count))
        return Ix(flat=var)


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel and what the runtime needs to launch it."""

    name: str
    source: str
    slots: tuple[int, ...]  # binding i <- slot
    uniforms: dict[str, str]  # uniform name -> symbolic dim
    grid: dict  # {"flat": size, "per_group": n} or {"tiles": [[size, tile], x3]}
    local_size: tuple[int, int, int]
    ir: tuple[str, ...]  # the IR lines it implements
    locs: tuple  # (file, line, column) of each, or None
    scalars: dict[str, str] = field(default_factory=dict)  # float uniform -> input name
    nan_flags: tuple[int, ...] = ()  # debug mode: the node whose NaN sets each flag


def source_name(loc) -> str:
    """The model file of a source location by its base name, as the manifest's "model" names
    it: shaders and kernel locs go into artifacts and web exports, which carry no path of the
    machine that compiled them."""
    return os.path.basename(loc.file)


def uniform_lines(ctx: Context) -> list[str]:
    """The uniforms of both targets: symbolic dims (`dim<k>`) and eager numbers (`scalar<n>`)."""
    lines = [
        f"uniform int dim{ctx.dim_index[d]};  // {comment(d)}" for d in sorted(ctx.dims_used, key=ctx.dim_index.get)
    ]
    return lines + [f"uniform float {u};  // {comment(name)}" for u, name in sorted(ctx.scalars_used.items())]


def kernel_source(ctx: Context, text: str, grid: dict, local: tuple[int, int, int]) -> KernelSource:
    g, k = ctx.graph, ctx.kernel
    text = prune_preamble(text)
    slots = tuple(s for s, _ in sorted(ctx.binding.items(), key=lambda kv: kv[1]))
    uniforms = {f"dim{ctx.dim_index[d]}": d for d in sorted(ctx.dims_used, key=lambda d: ctx.dim_index[d])}
    locs = tuple(
        (source_name(g.nodes[n].loc), g.nodes[n].loc.line, g.nodes[n].loc.column) if g.nodes[n].loc else None
        for n in k.nodes
    )
    flags = tuple(sorted(ctx.nan_flags, key=ctx.nan_flags.get))
    return KernelSource(k.name, text, slots, uniforms, grid, local, ctx.ir_lines, locs, dict(ctx.scalars_used), flags)


# The layout ops' lowering, for every GLSL target: an index map each (Emitter.value calls it).
LAYOUT_KEY = "glsl"
INDEX_MAPS = {
    "reshape": Emitter._reshape,
    "broadcast_to": Emitter._broadcast_to,
    "transpose": Emitter._transpose,
    "slice": Emitter._slice,
    "pad": Emitter._pad,
    "concat": Emitter._concat,
    "one_hot": Emitter._one_hot,
    "iota": Emitter._iota,
    "take": Emitter._take,
    "gather": Emitter._gather,
    "gather_grad": Emitter._gather_grad,
    "pick": Emitter._pick,
}
for _op, _index_map in INDEX_MAPS.items():
    registry.register_lowering(_op, LAYOUT_KEY, _index_map)
registry.register_lowering("leaf", LAYOUT_KEY, Emitter.load)  # a stored tensor: read where it is
