"""The .dl front end: statements from the parser -> IR through GraphBuilder.

Every name lookup, argument and shape is checked here (or by the shape rules
the builder runs), so each error carries the position of what caused it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from dlc.runtime.dims import product as dim_product
from dlc.runtime.errors import CompileError, Loc, did_you_mean, format_shape

from . import seed_names
from .attention_rewrite import fuse_attention
from .builder import GraphBuilder
from .dtypes import F32
from .functions import OPERATORS, REQUIRED, Function
from .initializers import INITIALIZERS, default_init, init_problem
from .ir import Graph
from .parser import BinOp, Call, Expr, ListExpr, Name, Neg, Num, Stmt, Str, parse
from .registry import FUNCTIONS

# NumPy's limit on dims (NPY_MAXDIMS is 32 before NumPy 2); it also bounds literal()'s recursion.
MAX_LITERAL_RANK = 32
# A const filled from a scalar is materialized in the IR: 2^20 floats is already 8 MiB there.
MAX_CONST_ELEMENTS = 1 << 20
# A for loop unrolls at compile time: every iteration is IR.
MAX_LOOP_ITERATIONS = 4096
# Operators a compile-time number expression (`range(N + 1)`, a size argument) may use.
STATIC_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z_0-9]*)\}")  # a `{i}` segment of a dotted name


@dataclass
class Frame:
    """The names one body sees: the top level, or one call of a def.

    Inside a call, a name `n` the body defines is the model's tensor `<prefix>n`: a call
    `block(x) as h.3` makes its `param attn.w` the param `h.3.attn.w`."""

    prefix: str  # "" at the top level, "h.3." in a call `as h.3`
    tensors: dict[str, int]  # top level: the builder's names; a call: its arguments and locals
    numbers: dict[str, float] = field(default_factory=dict)  # compile-time: sizes, loop variables
    assigned: set[str] = field(default_factory=set)  # bound by `NAME = EXPR`: a body may bind again
    defn: Stmt | None = None  # the def being run (None at the top level)
    call: Loc | None = None  # where it was called
    loops: int = 0  # for loops open around the current statement

    def where(self) -> str:
        """`in def 'block' called at line 20:9 as h.3`, for errors raised inside the call."""
        return f"in def '{self.defn.name}' called at line {self.call.line}:{self.call.column} as {self.prefix[:-1]}"


class FrontEnd:
    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.dims: dict[str, Loc] = {}
        self.later: dict[str, Loc] = {}
        self.defs: dict[str, Stmt] = {}
        self.top = Frame("", self.b.names)
        self.frames = [self.top]
        self.local_paths: set[str] = set()  # model names of a def call's locals (bound again per call)
        self.later_defs: dict[str, Loc] = {}

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    # -- statements ----------------------------------------------------------
    def run(self, stmts: list[Stmt]) -> Graph:
        # to say "defined later" (a def's, a loop's and unpacking's names are checked where used)
        kinds = ("input", "param", "const", "state", "loss", "metric", "assign")
        self.later = {s.name: s.loc for s in reversed(stmts) if s.kind in kinds}
        self.later_defs = {s.name: s.loc for s in stmts if s.kind == "def"}
        for s in stmts:
            self.stmt(s)
        # written-out attention becomes the fused op before anything differentiates it
        return fuse_attention(self.b.build())

    def stmt(self, s: Stmt) -> None:
        getattr(self, "stmt_" + s.kind)(s)

    def _shape(self, s: Stmt):
        return tuple(
            self._product(d[1], loc) if isinstance(d, tuple) else self._declared_dim(d, loc) for d, loc in s.shape or ()
        )

    def _declared_dim(self, d, loc: Loc):
        """A dim as declared: an int, a size (`const C = 64`, a def's argument) or a symbol."""
        if isinstance(d, str) and self.static_name(d) is not None:
            d = self._int(Name(loc, d), f"dim '{d}'")
        if isinstance(d, int) and d <= 0:
            raise CompileError(f"dims must be positive, got {d}", loc)
        if isinstance(d, str):
            if "." in d:
                raise CompileError(f"a dim name cannot contain '.': '{d}'", loc)
            self.dims.setdefault(d, loc)
        return d

    def _product(self, factors, loc: Loc):
        """A product dim of a declared shape (`H*D`, `3*C`): sizes multiply out; its symbols
        must be bound on their own."""
        resolved = []
        for f in factors:
            if isinstance(f, str) and self.static_name(f) is not None:
                f = self._int(Name(loc, f), f"dim '{f}'")
            if isinstance(f, int) and f <= 0:
                raise CompileError(f"dims must be positive, got {f}", loc)
            if isinstance(f, str) and f not in self.dims:
                raise CompileError(
                    f"dim '{f}' in a product is bound by no input: name it alone in an input's shape first", loc
                )
            resolved.append(f)
        return dim_product(*resolved)

    def _check_new(self, s: Stmt, name: str | None = None, loc: Loc | None = None) -> str:
        """The model name `s` (or its target `name` at `loc`) defines, checked to be new."""
        name, loc = self.path(name or s.name, loc or s.loc), loc or s.loc
        local = name[len(self.frame.prefix) :]
        if name in self.b.names and name not in self.local_paths or local in self.frame.tensors:
            first = self.b.name_locs.get(name)
            where = f" (first defined at line {first.line})" if first else ""
            f = self.frame
            if f is not self.top and local not in f.tensors:  # another call's
                where += f": give each call of def '{f.defn.name}' its own path, {f.defn.name}(...) as NAME"
            raise CompileError(f"duplicate name '{name}'{where}", loc)
        if local in self.frame.numbers:
            raise CompileError(f"duplicate name '{local}': it is a compile-time number here", loc)
        return name

    def _bind(self, name: str, i: int, loc: Loc) -> None:
        """Bind the model name `name` (a path under the frame's prefix) to node `i`."""
        f = self.frame
        local = name[len(f.prefix) :]
        if f is not self.top:
            f.tensors[local] = i
            if name in self.b.names and name not in self.local_paths:
                return  # a path someone else named: the local stays local
            self.local_paths.add(name)
        self.b.rebind(name, i, loc) if name in self.b.names else self.b.declare(name, i, loc)

    def stmt_input(self, s: Stmt):
        if self.frame is not self.top or self.frame.loops:
            raise CompileError("an input is declared at the top level, outside any def or loop", s.loc)
        if "." in s.name:
            raise CompileError(f"an input's name cannot contain '.': '{s.name}' (CSV columns use dots)", s.loc)
        self._check_new(s)
        self.b.input(s.name, self._shape(s), s.loc, dtype=s.dtype[0] if s.dtype else F32)

    def _float_only(self, s: Stmt):
        """Params train and consts are numbers: both are f32 (an i32 value comes from an input)."""
        if s.dtype and s.dtype[0] != F32:
            raise CompileError(
                f"{s.kind} '{s.name}' is declared {s.dtype[0]}: a {s.kind} is f32 "
                "(integers come from inputs, or int(x))",
                s.dtype[1],
            )

    def stmt_param(self, s: Stmt):
        name = self._check_new(s)
        self._float_only(s)
        shape = self._shape(s)
        for d, (_, loc) in zip(shape, s.shape):
            if isinstance(d, str):
                raise CompileError(f"param '{name}' has symbolic dim '{d}': a param's shape must be concrete", loc)
        init = default_init(shape) if s.value is None else self.initializer(s.value)
        i = self.b.param(name, shape, init, s.loc, frozen=s.frozen)
        if self.frame is not self.top:
            self.frame.tensors[name[len(self.frame.prefix) :]] = i

    def stmt_state(self, s: Stmt):
        name = self._check_new(s)
        self._float_only(s)
        shape = self._shape(s)
        for d, (_, loc) in zip(shape, s.shape):
            if isinstance(d, str):
                raise CompileError(f"state '{name}' has symbolic dim '{d}': a state's shape must be concrete", loc)
        i = self.b.state(name, shape, self.initializer(s.value), s.loc)
        if self.frame is not self.top:
            self.frame.tensors[name[len(self.frame.prefix) :]] = i

    def stmt_update(self, s: Stmt):
        name = self.path(s.name, s.loc)
        if name not in self.b.states:
            known = [n[len(self.frame.prefix) :] for n in self.b.states if n.startswith(self.frame.prefix)]
            raise CompileError(
                f"'{s.name}' is not a state: declare it `state {s.name}: [...] = INIT`{did_you_mean(s.name, known)}",
                s.loc,
            )
        self.b.update(name, self.tensor(s.value), s.loc)

    def stmt_const(self, s: Stmt):
        self._float_only(s)
        name = self._check_new(s)
        values, shape = self.literal(s.value)
        if s.shape is None and shape == ():  # a size, usable where a compile-time int is
            self.frame.numbers[name[len(self.frame.prefix) :]] = values
        if s.shape is not None:
            want = self._shape(s)
            if any(isinstance(d, str) for d in want):
                raise CompileError(f"const '{name}' must have a concrete shape", s.loc)
            if shape == ():
                if _prod(want) > MAX_CONST_ELEMENTS:
                    raise CompileError(
                        f"const '{name}' {format_shape(want)} has {_prod(want):,} "
                        f"elements; a const holds at most {MAX_CONST_ELEMENTS:,} "
                        "(its values live in the compiled model)",
                        s.loc,
                    )
                values, shape = [values] * _prod(want), want
            elif shape != want:
                raise CompileError(
                    f"const '{name}' is declared {format_shape(want)} but its value has shape {format_shape(shape)}",
                    s.value.loc,
                )
        i = self.b.add("const", (), s.loc, shape=shape, value=tuple(_flat(values)))
        self._bind(name, i, s.loc)

    def stmt_assign(self, s: Stmt):
        self._assign(s.name, s.loc, self.tensor(s.value))

    def _assign(self, target: str, loc: Loc, i: int) -> None:
        """`target = ...`: a def's or a loop's body may bind a name it assigned before again
        (`x = block(x)`); elsewhere every name is defined once."""
        f = self.frame
        name = self.path(target, loc)
        local = name[len(f.prefix) :]
        again = local in f.assigned and (f is not self.top or f.loops)
        if not again:
            self._check_new(None, target, loc)
        f.assigned.add(local)
        self._bind(name, i, loc)

    def stmt_unpack(self, s: Stmt):
        """`a, b = f(...)`: the values a def returns, or the tensors a function gives (split)."""
        e = s.value
        seen = set()
        for target, loc in s.names:
            if target in seen:
                raise CompileError(f"'{target}' is bound twice in one statement", loc)
            seen.add(target)
        if isinstance(e, Call) and e.func in self.defs:
            values = self.call_def(e, want=len(s.names))
        else:
            values = self.tensor(e, several=True)
            if not isinstance(values, tuple):
                raise CompileError(f"{len(s.names)} names, but the right side is one tensor", e.loc)
            if len(values) != len(s.names):
                raise CompileError(f"{len(s.names)} names for {len(values)} tensors", e.loc)
        for (target, loc), i in zip(s.names, values):
            self._assign(target, loc, i)

    def stmt_loss(self, s: Stmt):
        self.b.loss(*self._top_level_scalar(s))

    def stmt_metric(self, s: Stmt):
        self.b.metric(*self._top_level_scalar(s))

    def _top_level_scalar(self, s: Stmt) -> tuple[str, int, Loc]:
        """A `loss` or `metric` statement's name, node and the position of its expression."""
        if self.frame is not self.top:
            raise CompileError(f"a {s.kind} is declared at the top level, not in a def", s.loc)
        name = self._check_new(s)
        i = self.tensor(s.value)
        self._bind(name, i, s.loc)
        return name, i, s.value.loc

    # -- defs and loops ------------------------------------------------------
    def stmt_def(self, s: Stmt):
        if self.frame is not self.top or self.frame.loops:
            raise CompileError("a def is defined at the top level, outside any def or loop", s.loc)
        if s.name in FUNCTIONS:
            raise CompileError(f"def '{s.name}' would hide the built-in function '{s.name}'", s.loc)
        if s.name in self.defs or s.name in self.b.names:
            first = self.defs[s.name].loc if s.name in self.defs else self.b.name_locs.get(s.name)
            where = f" (first defined at line {first.line})" if first else ""
            raise CompileError(f"duplicate name '{s.name}'{where}", s.loc)
        seen = set()
        for arg, loc in s.names:
            if "." in arg or arg in seen:
                why = "cannot contain '.'" if "." in arg else "is given twice"
                raise CompileError(f"argument '{arg}' of def '{s.name}' {why}", loc)
            seen.add(arg)
        returns = [i for i, b in enumerate(s.body) if b.kind == "return"]
        if not returns:
            raise CompileError(f"def '{s.name}' has no return: end its body with `return EXPR`", s.loc)
        if returns[0] != len(s.body) - 1:
            raise CompileError("return is the last statement of a def's body", s.body[returns[0]].loc)
        self._check_body(s.body)
        self.defs[s.name] = s
        self.later_defs.pop(s.name, None)

    def _check_body(self, body) -> None:
        """A return inside a loop, or a def inside a def: refused where it is written."""
        for b in body:
            if b.kind == "def":
                raise CompileError("a def is defined at the top level, outside any def or loop", b.loc)
            if b.kind == "for":
                for inner in b.body:
                    if inner.kind == "return":
                        raise CompileError("return is the last statement of a def's body, not in a loop", inner.loc)
                self._check_body(b.body)

    def stmt_return(self, s: Stmt):
        raise CompileError("return is only the last statement of a def's body", s.loc)

    def stmt_for(self, s: Stmt):
        e, f = s.value, self.frame
        if not (
            isinstance(e, Call) and e.func == "range" and not e.kwargs and e.scope is None and 1 <= len(e.args) <= 3
        ):
            raise CompileError("a for loop runs over range(N), range(start, stop) or range(start, stop, step)", e.loc)
        bounds = [self._int(a, "an argument of range") for a in e.args]
        if len(bounds) == 3 and bounds[2] == 0:
            raise CompileError("range's step must not be 0", e.args[2].loc)
        steps = range(*bounds)
        if len(steps) > MAX_LOOP_ITERATIONS:
            raise CompileError(
                f"range gives {len(steps):,} iterations; a loop unrolls at most {MAX_LOOP_ITERATIONS:,}", e.loc
            )
        if "." in s.name or s.name in f.tensors or s.name in f.numbers:
            raise CompileError(f"the loop variable '{s.name}' must be a new plain name", s.loc)
        f.loops += 1
        try:
            for i in steps:
                f.numbers[s.name] = i
                for b in s.body:
                    self.stmt(b)
        finally:
            f.loops -= 1
            f.numbers.pop(s.name, None)

    def call_def(self, e: Call, want: int | None = None, args: list | None = None) -> list[int]:
        """Run the def `e.func` for the call `e`: its params under the call's path, its
        body's errors naming the call. `args`: the arguments already evaluated."""
        d = self.defs[e.func]
        if any(f.defn is d for f in self.frames):
            raise CompileError(f"def '{d.name}' calls itself: recursion is not supported", e.loc)
        names = [a for a, _ in d.names]
        if args is None:
            args = [self._def_argument(a) for a in self._bind_def_args(d, e)]
        scope, scope_loc = e.scope if e.scope else (d.name, e.loc)
        prefix = self.path(scope, scope_loc) + "."
        frame = Frame(prefix, {}, defn=d, call=e.loc)
        for name, value in zip(names, args):
            if isinstance(value, _Node):
                frame.tensors[name] = value.i
            else:
                frame.numbers[name] = value
            frame.assigned.add(name)
        self.frames.append(frame)
        try:
            for b in d.body[:-1]:
                self.stmt(b)
            out = [self.tensor(v) for v in d.body[-1].values]
        except CompileError as err:
            raise CompileError(f"{err.message} ({frame.where()})", err.loc) from None
        finally:
            self.frames.pop()
        n = len(out)
        if want is None and n != 1:
            raise CompileError(f"def '{d.name}' returns {n} values: unpack them, a, b = {d.name}(...)", e.loc)
        if want is not None and n != want:
            raise CompileError(f"def '{d.name}' returns {n} value{'s' if n != 1 else ''}, not {want}", e.loc)
        return out

    def _bind_def_args(self, d: Stmt, e: Call) -> list[Expr]:
        names = [a for a, _ in d.names]
        if len(e.args) > len(names):
            raise CompileError(
                f"def '{d.name}' takes {len(names)} arguments, got {len(e.args)}", e.args[len(names)].loc
            )
        bound = dict(zip(names, e.args))
        for key, value, kloc in e.kwargs:
            if key not in names:
                raise CompileError(f"def '{d.name}' has no argument '{key}'{did_you_mean(key, names)}", kloc)
            if key in bound:
                raise CompileError(f"def '{d.name}' got argument '{key}' twice", kloc)
            bound[key] = value
        missing = [n for n in names if n not in bound]
        if missing:
            raise CompileError(f"def '{d.name}' is missing argument '{missing[0]}'", e.loc)
        return [bound[n] for n in names]

    def _def_argument(self, e: Expr, tensor: bool = True):
        """A compile-time number stays a number (a size); anything else is a tensor (None
        when not `tensor`: the caller builds it)."""
        if isinstance(e, Str):
            raise CompileError("a def's argument is a tensor or a number, not a string", e.loc)
        v = self.static(e)
        if v is not None or not tensor:
            return v
        return _Node(self.tensor(e))

    # -- names ----------------------------------------------------------------
    def path(self, name: str, loc: Loc) -> str:
        """The model name of `name` written in the current body: its `{i}` segments filled
        in, under the frame's prefix."""

        def fill(m):
            key = m.group(1)
            v = self.static_name(key)
            if v is None or v != int(v):
                raise CompileError(f"'{{{key}}}' in a name must be a loop variable or an integer size", loc)
            return str(int(v))

        return self.frame.prefix + _SLOT.sub(fill, name)

    def static_name(self, name: str):
        """The compile-time number `name` is here, or None."""
        for f in (self.frame, self.top):
            if name in f.numbers:
                return f.numbers[name]
            if name in f.tensors:
                return None
        return math.inf if name == "inf" else None

    def static(self, e: Expr):
        """The value of a compile-time number expression (numbers, sizes, loop variables,
        `inf`, + - * /), or None when `e` is a tensor expression. (Walked with a stack: a
        model may nest 2000 minus signs.)"""
        todo, done = [(e, False)], []
        while todo:
            x, ready = todo.pop()
            if isinstance(x, Neg):
                if ready:
                    v = done.pop()
                    done.append(None if v is None else -v)
                else:
                    todo += [(x, True), (x.operand, False)]
            elif isinstance(x, BinOp) and x.op in STATIC_OPS:
                if ready:
                    b, a = done.pop(), done.pop()
                    done.append(None if a is None or b is None else self._static_op(x, a, b))
                else:
                    todo += [(x, True), (x.right, False), (x.left, False)]
            elif isinstance(x, Num):
                whole = x.value == int(x.value) and not any(c in x.text for c in ".eE")
                done.append(int(x.value) if whole else x.value)
            elif isinstance(x, Name):
                done.append(None if "{" in x.name else self.static_name(x.name))
            else:
                done.append(None)
        return done[0]

    @staticmethod
    def _static_op(e: BinOp, a, b):
        if e.op == "/" and b == 0:
            raise CompileError("division by zero in a compile-time number", e.loc)
        if e.op == "/" and isinstance(a, int) and isinstance(b, int) and a % b == 0:
            return a // b
        return STATIC_OPS[e.op](a, b)

    def lookup(self, name: str, loc: Loc) -> int | None:
        """The node the tensor `name` names here (a def's body sees its own names, then the
        top level's), or None."""
        for f in (self.frame, self.top):
            if name in f.tensors:  # first: a top-level `const N = 6` is a tensor node too
                return f.tensors[name]
            if name in f.numbers:
                return self.b.const(float(f.numbers[name]), (), loc)
        return None

    # -- initializers and literals -------------------------------------------
    def initializer(self, e: Expr) -> tuple:
        if self.static(e) is not None and not (isinstance(e, Name) and e.name in INITIALIZERS):
            return ("value", self.number(e, "an initializer"))
        if isinstance(e, Name):
            if e.name in INITIALIZERS and not INITIALIZERS[e.name]:
                return (e.name,)
            if e.name in INITIALIZERS:
                return self._init_call(Call(e.loc, e.name, (), ()))
            raise CompileError(f"unknown initializer '{e.name}'{did_you_mean(e.name, INITIALIZERS)}", e.loc)
        if isinstance(e, Call):
            return self._init_call(e)
        raise CompileError(
            "an initializer is a number, zeros, ones, glorot, he, normal(mean, std) or uniform(low, high)", e.loc
        )

    def _init_call(self, e: Call) -> tuple:
        if e.func not in INITIALIZERS:
            raise CompileError(f"unknown initializer '{e.func}'{did_you_mean(e.func, INITIALIZERS)}", e.loc)
        params = INITIALIZERS[e.func]
        values = dict(params)
        if len(e.args) > len(params):
            raise CompileError(f"{e.func} takes at most {len(params)} arguments", e.args[len(params)].loc)
        locs = {}
        for (key, _), a in zip(params, e.args):
            values[key] = self.number(a, f"argument '{key}' of {e.func}")
            locs[key] = a.loc
        for key, a, loc in e.kwargs:
            if key not in values:
                raise CompileError(f"{e.func} has no argument '{key}'{did_you_mean(key, values)}", loc)
            if key in locs:
                raise CompileError(f"{e.func} got argument '{key}' twice", loc)
            values[key] = self.number(a, f"argument '{key}' of {e.func}")
            locs[key] = a.loc
        init = (e.func, *(values[k] for k, _ in params))
        problem = init_problem(init)
        if problem:
            key, message = problem
            raise CompileError(message, locs.get(key, e.loc))
        return init

    def number(self, e: Expr, what: str) -> float:
        v = self.static(e)
        if v is None:
            raise CompileError(f"{what} must be a number", e.loc)
        return float(v)

    def literal(self, e: Expr, depth: int = 0):
        """A number or nested list of numbers -> (nested values, shape)."""
        if isinstance(e, ListExpr):
            if not e.items:
                raise CompileError("an empty list is not a tensor", e.loc)
            if depth >= MAX_LITERAL_RANK:
                raise CompileError(
                    f"a list literal nested more than {MAX_LITERAL_RANK} deep: "
                    f"a tensor has at most {MAX_LITERAL_RANK} dims",
                    e.loc,
                )
            parts = [self.literal(i, depth + 1) for i in e.items]
            for item, (_, shape) in zip(e.items, parts):
                if shape != parts[0][1]:
                    raise CompileError("a literal's rows must all have the same shape", item.loc)
            return [p[0] for p in parts], (len(parts), *parts[0][1])
        return self.number(e, "a literal's element"), ()

    # -- expressions ---------------------------------------------------------
    # Sub-expressions are built through an explicit stack, not Python recursion, so a sum
    # of 1000 terms or 2000 nested calls builds: each step is a generator that yields the
    # sub-expression it needs as a tensor and is sent back that tensor's node.
    def tensor(self, e: Expr, several: bool = False) -> int:
        """The node of expression `e`; with `several`, a function's several results (`split`)
        may come back as a tuple (an unpack statement's right side)."""
        stack = [(self._tensor(e), e)]
        value = None
        while stack:
            try:
                sub = stack[-1][0].send(value)
            except StopIteration as done:
                _, done_expr = stack.pop()
                value = done.value
            else:
                stack.append((self._tensor(sub), sub))
                value = None
                continue
            if isinstance(value, tuple) and (stack or not several):
                raise CompileError(
                    f"this gives {len(value)} tensors: bind them with {len(value)} names, "
                    f"`a, b = {getattr(done_expr, 'func', 'f')}(...)`",
                    done_expr.loc,
                )
        return value

    def _tensor(self, e: Expr):
        b = self.b
        if isinstance(e, Num):
            return b.const(e.value, (), e.loc)
        if isinstance(e, Name):
            name = self.path(e.name, e.loc)[len(self.frame.prefix) :]
            i = self.lookup(name, e.loc)
            if i is not None:
                return i
            if name == "inf":
                return b.const(math.inf, (), e.loc)
            if e.name in FUNCTIONS or e.name in self.defs:
                raise CompileError(f"'{e.name}' is a function: call it as {e.name}(...)", e.loc)
            if e.name in self.later:
                raise CompileError(f"'{e.name}' is used before its definition at line {self.later[e.name].line}", e.loc)
            known = [*self.frame.tensors, *self.frame.numbers, *self.top.tensors]
            raise CompileError(f"unknown name '{name}'{did_you_mean(name, known)}", e.loc)
        if isinstance(e, Neg):
            v = self.static(e)
            if v is not None:
                return b.const(float(v), (), e.loc)
            return (yield from self._call_function(FUNCTIONS["neg"], [e.operand], [], e.loc))
        if isinstance(e, BinOp):
            return (yield from self._call_function(FUNCTIONS[OPERATORS[e.op]], [e.left, e.right], [], e.loc))
        if isinstance(e, Call):
            if e.func in self.defs:
                args = []
                for a in self._bind_def_args(self.defs[e.func], e):  # tensors through the stack
                    v = self._def_argument(a, tensor=False)
                    args.append(v if v is not None else _Node((yield a)))
                return self.call_def(e, args=args)[0]
            if e.scope is not None:
                raise CompileError(f"`as {e.scope[0]}` names a def's call; {e.func} is not a def", e.scope[1])
            if e.func == "range":
                raise CompileError("range(...) is for loops: for i in range(N) { ... }", e.loc)
            if e.func in self.later_defs:
                line = self.later_defs[e.func].line
                raise CompileError(f"def '{e.func}' is called before its definition at line {line}", e.loc)
            fn = FUNCTIONS.get(e.func)
            if fn is None:
                hint = seed_names.suggest(e.func, FUNCTIONS)  # knows the seeds' camelCase
                raise CompileError(f"unknown function '{e.func}'{hint}", e.loc)
            return (yield from self._call_function(fn, list(e.args), list(e.kwargs), e.loc))
        if isinstance(e, ListExpr):
            values, shape = self.literal(e)
            return b.const(values, shape, e.loc)
        if isinstance(e, Str):
            raise CompileError("a string is not a tensor", e.loc)
        raise CompileError("not an expression", e.loc)

    def _call_function(self, fn: Function, args: list[Expr], kwargs, loc: Loc):
        params = fn.params
        if len(args) > len(params):
            n = len(params)
            raise CompileError(
                f"{fn.name} takes at most {n} argument{'s' if n != 1 else ''}, got {len(args)}", args[n].loc
            )
        bound: dict[str, Expr] = {p.name: a for p, a in zip(params, args)}
        names = [p.name for p in params]
        for key, value, kloc in kwargs:
            if key not in names:
                raise CompileError(f"{fn.name} has no argument '{key}'{did_you_mean(key, names)}", kloc)
            if key in bound:
                raise CompileError(f"{fn.name} got argument '{key}' twice", kloc)
            bound[key] = value
        values = {}
        for p in params:
            if p.name in bound:
                what = f"argument '{p.name}' of {fn.name}"
                values[p.name] = yield from self._convert(bound[p.name], p.kind, what)
            elif p.default is REQUIRED:
                raise CompileError(f"{fn.name} is missing argument '{p.name}'", loc)
            else:
                values[p.name] = p.default
        return fn.impl(self.b, loc, *values.values())

    def _convert(self, e: Expr, kind: str, what: str):
        if kind == "tensor":
            return (yield e)
        if kind == "tensors":
            if not isinstance(e, ListExpr):
                raise CompileError(f"{what} must be a list of tensors [a, b, ...]", e.loc)
            out = []
            for i in e.items:
                out.append((yield i))
            return out
        if kind == "float":
            return self.number(e, what)
        if kind == "int":
            return self._int(e, what)
        if kind == "bool":
            if isinstance(e, Name) and e.name.lower() in ("true", "false"):
                return e.name.lower() == "true"
            raise CompileError(f"{what} must be true or false", e.loc)
        if kind == "str":
            if isinstance(e, Str):
                return e.value
            raise CompileError(f'{what} must be a string such as "same"', e.loc)
        if kind == "padding":  # "same" / "valid" or [top, bottom, left, right]
            if isinstance(e, Str):
                return e.value
            return (yield from self._convert(e, "ints", what))
        if kind in ("axis", "ints"):
            if kind == "axis" and isinstance(e, Name) and e.name in ("all", "none", "None"):
                return None
            if isinstance(e, ListExpr):
                return tuple(self._int(i, what) for i in e.items)
            return self._int(e, what)
        if kind == "dim":
            return self._dim(e, what)
        if kind == "dims":
            if not isinstance(e, ListExpr):
                raise CompileError(f"{what} must be a list of dims [d1, d2, ...]", e.loc)
            return tuple(self._dim(i, what) for i in e.items)
        raise AssertionError(kind)

    def _int(self, e: Expr, what: str) -> int:
        v = self.static(e)
        if v is None or not math.isfinite(v) or v != int(v):
            raise CompileError(f"{what} must be an integer", e.loc)
        return int(v)

    def _dim(self, e: Expr, what: str):
        if isinstance(e, BinOp) and e.op == "*":  # a product of dims: `B*T`, `H*D`
            factors = (self._dim(e.left, what), self._dim(e.right, what))
            if any(isinstance(f, int) and f <= 0 for f in factors):
                raise CompileError(f"{what}: a product of dims takes positive factors, got {factors}", e.loc)
            return dim_product(*factors)
        if isinstance(e, Name) and self.static(e) is None:
            if e.name not in self.dims:
                raise CompileError(f"unknown dim '{e.name}'{did_you_mean(e.name, self.dims)}", e.loc)
            return e.name
        return self._int(e, what)


@dataclass(frozen=True)
class _Node:
    """A def's tensor argument (its node), told apart from a number argument."""

    i: int


def compile_source(text: str, file: str = "<model>") -> Graph:
    return FrontEnd().run(parse(text, file))


def _prod(shape):
    out = 1
    for d in shape:
        out *= d
    return out


def _flat(v):
    if isinstance(v, list):
        for x in v:
            yield from _flat(x)
    else:
        yield float(v)
