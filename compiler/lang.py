"""The .dl front end: statements from the parser -> IR through GraphBuilder.

Every name lookup, argument and shape is checked here (or by the shape rules
the builder runs), so each error carries the position of what caused it.
"""

from __future__ import annotations

from dlc.runtime.dims import product as dim_product
from dlc.runtime.errors import CompileError, Loc, did_you_mean, format_shape

from . import seed_names
from .builder import GraphBuilder
from .functions import FUNCTIONS, OPERATORS, REQUIRED, Function
from .initializers import INITIALIZERS, default_init, init_problem
from .ir import Graph
from .parser import BinOp, Call, Expr, ListExpr, Name, Neg, Num, Stmt, Str, parse

# NumPy's limit on dims (NPY_MAXDIMS is 32 before NumPy 2); it also bounds literal()'s recursion.
MAX_LITERAL_RANK = 32
# A const filled from a scalar is materialized in the IR: 2^20 floats is already 8 MiB there.
MAX_CONST_ELEMENTS = 1 << 20


class FrontEnd:
    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.dims: dict[str, Loc] = {}
        self.later: dict[str, Loc] = {}

    # -- statements ----------------------------------------------------------
    def run(self, stmts: list[Stmt]) -> Graph:
        self.later = {s.name: s.loc for s in reversed(stmts)}  # to say "defined later"
        for s in stmts:
            getattr(self, "stmt_" + s.kind)(s)
        return self.b.build()

    def _shape(self, s: Stmt):
        for d, loc in s.shape or ():
            if isinstance(d, int) and d <= 0:
                raise CompileError(f"dims must be positive, got {d}", loc)
            if isinstance(d, str):
                self.dims.setdefault(d, loc)
        return tuple(self._product(d[1], loc) if isinstance(d, tuple) else d for d, loc in s.shape or ())

    def _product(self, factors, loc: Loc):
        """A product dim of a declared shape (`H*D`): its symbols must be bound on their own."""
        for f in factors:
            if isinstance(f, int) and f <= 0:
                raise CompileError(f"dims must be positive, got {f}", loc)
            if isinstance(f, str) and f not in self.dims:
                raise CompileError(
                    f"dim '{f}' in a product is bound by no input: name it alone in an input's shape first", loc
                )
        return dim_product(*factors)

    def _check_new(self, s: Stmt):
        if s.name in self.b.names:
            first = self.b.name_locs.get(s.name)
            where = f" (first defined at line {first.line})" if first else ""
            raise CompileError(f"duplicate name '{s.name}'{where}", s.loc)

    def stmt_input(self, s: Stmt):
        self._check_new(s)
        self.b.input(s.name, self._shape(s), s.loc)

    def stmt_param(self, s: Stmt):
        self._check_new(s)
        shape = self._shape(s)
        for d, (_, loc) in zip(shape, s.shape):
            if isinstance(d, str):
                raise CompileError(f"param '{s.name}' has symbolic dim '{d}': a param's shape must be concrete", loc)
        init = default_init(shape) if s.value is None else self.initializer(s.value)
        self.b.param(s.name, shape, init, s.loc)

    def stmt_const(self, s: Stmt):
        self._check_new(s)
        values, shape = self.literal(s.value)
        if s.shape is not None:
            want = self._shape(s)
            if any(isinstance(d, str) for d in want):
                raise CompileError(f"const '{s.name}' must have a concrete shape", s.loc)
            if shape == ():
                if _prod(want) > MAX_CONST_ELEMENTS:
                    raise CompileError(
                        f"const '{s.name}' {format_shape(want)} has {_prod(want):,} "
                        f"elements; a const holds at most {MAX_CONST_ELEMENTS:,} "
                        "(its values live in the compiled model)",
                        s.loc,
                    )
                values, shape = [values] * _prod(want), want
            elif shape != want:
                raise CompileError(
                    f"const '{s.name}' is declared {format_shape(want)} but its value has shape {format_shape(shape)}",
                    s.value.loc,
                )
        i = self.b.add("const", (), s.loc, shape=shape, value=tuple(_flat(values)))
        self.b.declare(s.name, i, s.loc)

    def stmt_assign(self, s: Stmt):
        self._check_new(s)
        self.b.declare(s.name, self.tensor(s.value), s.loc)

    def stmt_unpack(self, s: Stmt):
        for t in s.targets:
            self._check_new(Stmt("assign", t.name, t.loc))
        seen = set()
        for t in s.targets:
            if t.name in seen:
                raise CompileError(f"'{t.name}' is bound twice in one statement", t.loc)
            seen.add(t.name)
        values = self.tensor(s.value, several=True)
        if not isinstance(values, tuple):
            raise CompileError(f"{len(s.targets)} names, but the right side is one tensor", s.value.loc)
        if len(values) != len(s.targets):
            raise CompileError(f"{len(s.targets)} names for {len(values)} tensors", s.value.loc)
        for t, i in zip(s.targets, values):
            self.b.declare(t.name, i, t.loc)

    def stmt_loss(self, s: Stmt):
        self._check_new(s)
        i = self.tensor(s.value)
        self.b.declare(s.name, i, s.loc)
        self.b.loss(s.name, i, s.value.loc)

    # -- initializers and literals -------------------------------------------
    def initializer(self, e: Expr) -> tuple:
        if isinstance(e, (Num, Neg)):
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
        if isinstance(e, Num):
            return e.value
        if isinstance(e, Neg) and isinstance(e.operand, Num):
            return -e.operand.value
        raise CompileError(f"{what} must be a number", e.loc)

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
            if e.name in b.names:
                return b.names[e.name]
            if e.name in FUNCTIONS:
                raise CompileError(f"'{e.name}' is a function: call it as {e.name}(...)", e.loc)
            if e.name in self.later:
                raise CompileError(f"'{e.name}' is used before its definition at line {self.later[e.name].line}", e.loc)
            raise CompileError(f"unknown name '{e.name}'{did_you_mean(e.name, b.names)}", e.loc)
        if isinstance(e, Neg):
            if isinstance(e.operand, Num):
                return b.const(-e.operand.value, (), e.loc)
            return (yield from self._call_function(FUNCTIONS["neg"], [e.operand], [], e.loc))
        if isinstance(e, BinOp):
            return (yield from self._call_function(FUNCTIONS[OPERATORS[e.op]], [e.left, e.right], [], e.loc))
        if isinstance(e, Call):
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
        v = self.number(e, what) if isinstance(e, (Num, Neg)) else None
        if v is None or v != int(v):
            raise CompileError(f"{what} must be an integer", e.loc)
        return int(v)

    def _dim(self, e: Expr, what: str):
        if isinstance(e, BinOp) and e.op == "*":  # a product of dims: `B*T`, `H*D`
            factors = (self._dim(e.left, what), self._dim(e.right, what))
            if any(isinstance(f, int) and f <= 0 for f in factors):
                raise CompileError(f"{what}: a product of dims takes positive factors, got {factors}", e.loc)
            return dim_product(*factors)
        if isinstance(e, Name):
            if e.name not in self.dims:
                raise CompileError(f"unknown dim '{e.name}'{did_you_mean(e.name, self.dims)}", e.loc)
            return e.name
        return self._int(e, what)


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
