"""The GL backend of Session: the IR compiled to GLSL programs and run on the GPU.

It takes the artifact's path in memory: (graph, fetches[, updates]) -> fuse, plan, GLSL
(`dlc.compiler.pipeline`) -> a program spec that `dlc.runtime.executor` runs. Programs are
compiled once per (graph, fetches, training or not) and kept; params and optimizer state live
on the GPU in a `LeafStore` shared by all of them.

An eval program is also compiled once per class of batch size (`batch_class`: 1, 2-15,
16-127, 128 and up of each input's leading dim) that comes twice (the first time, the
program of another class serves it): its tiles are chosen at the sizes it is planned at,
and ResNet-50's kernels planned at batch 1 took 19 of a batch of 32's GPU ms where its own
plan takes 16 (and the other way 8.3 ms against 2.7 for batch 1, on the H100).
A training program keeps one plan: its batch is fixed but for a last short batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dlc.compiler import compile_cache
from dlc.compiler.ir import Graph, cone
from dlc.runtime.device import get_context
from dlc.runtime.elements import from_storage
from dlc.runtime.executor import Executor, LeafStore
from dlc.runtime.optional import require
from dlc.runtime.target import choose_target

from .. import debug
from .protocol import track_gl


class GLBackend:
    name = "gl"

    def __init__(self, options: Mapping | None = None, target: str | None = None) -> None:
        get_context()  # RuntimeFailure with a one-line reason when there is no GL

        self.target, self.target_reason = choose_target(target)
        if self.target == "texture":  # its module imported here only: compute is the default
            textures = require("dlc.runtime.texture_executor")
            self.store = textures.TextureStore()
            self._executor_class = textures.TextureExecutor
        else:
            self.store = LeafStore()
            self._executor_class = Executor
        self.options = dict(options or {})
        self.hook = None  # a per-launch hook of the caller's (see runtime/executor.py)
        # key -> (graph kept alive so its id stays unique, compiled program, executor)
        self._programs: dict[tuple, tuple[Graph, object, Executor]] = {}
        self._debug_hooks: dict[tuple, debug.GLHook] = {}
        self._leading: dict[tuple, tuple[str, ...]] = {}  # (graph id, roots) -> batch dims
        self._seen: set[tuple] = set()  # program keys whose class of batch size came once
        track_gl(self)

    # -- leaves ----------------------------------------------------------------------------
    def set_leaf(self, name: str, value: np.ndarray, *, snapshot: bool = True) -> None:
        """`snapshot=False`: a leaf no step writes (training data), left out of snapshots."""
        self.store.set(name, value, snapshot=snapshot)

    def drop_leaf(self, name: str) -> None:
        """Free a leaf's GPU buffer."""
        self.store.drop(name)

    def get_leaf(self, name: str) -> np.ndarray:
        return self.store.get(name)

    def snapshot(self) -> object:
        return self.store.snapshot()

    def restore(self, token: object) -> None:
        self.store.restore(token)

    # -- running ---------------------------------------------------------------------------
    def program(self, graph: Graph, roots: Sequence[int], training: bool, dims: Mapping[str, int]):
        """The compiled program for these fetches (compiled on first use, planned at `dims`)."""
        checked = debug.enabled() and self.hook is None  # debug mode: kernels flag NaN per node
        roots = tuple(roots)
        # a program per class of batch size: kernels are chosen by the sizes planned for (a
        # weight gradient over a batch of 4 sums its 4 terms an output, no tile)
        key = (id(graph), roots, training, checked, self._batch_class(graph, roots, dims))
        found = self._programs.get(key)
        if found is None and key[4]:
            found = self._larger(key) if training else self._stand_in(key)
        if found is None:
            # the matmul tuning table's row for this GPU (compiler/codegen/matmul_tuning.py)
            # and its limits, which every kernel respects (compiler/limits.py)
            ctx = get_context()
            options = {"device": ctx.renderer, "limits": ctx.limits, **self.options}
            if checked:
                options["nan_flags"] = True
            compiled = self._compile(graph, roots, training, dict(dims), options, cached=not debug.enabled())
            executor = self._executor_class(compiled.spec, compiled.sources, self.store, self.hook)
            found = self._programs[key] = (graph, compiled, executor)
        graph, compiled, executor = found
        executor.hook = self.hook or (self._debug_hook(key, graph, compiled, executor) if debug.enabled() else None)
        return compiled, executor

    def _larger(self, key: tuple):
        """A training program planned for batches as large or larger serves a smaller one (an
        epoch's last short batch compiles nothing); a larger batch gets its own at once, not a
        program whose kernels were chosen for fewer rows."""
        for k, p in self._programs.items():
            if k[:4] == key[:4] and all(c >= want for (_, c), (_, want) in zip(k[4], key[4])):
                return p
        return None

    def _stand_in(self, key: tuple):
        """The first time a class of batch size comes, an eval program planned for another
        class serves it (an epoch's last short batch is not worth a compile); the second
        time, it gets its own (None)."""
        if key in self._seen:
            return None
        others = [p for k, p in self._programs.items() if k[:4] == key[:4]]
        if not others:
            return None
        self._seen.add(key)
        return others[-1]

    def _batch_class(self, graph: Graph, roots: tuple, dims: Mapping[str, int]) -> tuple:
        key = (id(graph), roots)
        leading = self._leading.get(key)
        if leading is None:
            leading = self._leading[key] = batch_dims(graph, roots)
        return tuple((d, batch_class(dims[d])) for d in leading if d in dims)

    def _compile(self, graph: Graph, roots: Sequence[int], training: bool, dims: dict, options: dict, cached: bool):
        """The back end's program for these fetches, from dlc's compile cache on disk when it
        holds it (compiler/compile_cache.py; not in debug mode, whose hooks need the fusion)."""

        name = "train" if training else "eval"
        updates = graph.updates if training else ()

        def compile():
            # codegen, needed only when the compile cache misses
            return require("dlc.compiler.pipeline").compile_program(
                graph, roots, name=name, updates=updates, ref_dims=dims, options=options, target=self.target
            )

        key = None
        if cached and compile_cache.enabled():
            key = compile_cache.program_key(graph, roots, updates, dims, options, self.target)
        if key is None:
            return compile()
        found = compile_cache.load_program(key)
        if found is not None and found[0].name == name:
            return compile_cache.CachedProgram(name, *found, compile)
        compiled = compile()
        compile_cache.store_program(key, compiled.spec, compiled.sources)
        return compiled

    def _debug_hook(self, key: tuple, graph: Graph, compiled, executor: Executor) -> debug.GLHook:
        """Debug mode: time each launch and trace a NaN to the IR node (and .dl line) making it."""
        hook = self._debug_hooks.get(key)
        if hook is None:
            hook = self._debug_hooks[key] = debug.GLHook(graph, compiled.fusion, executor)
        return hook

    def run(
        self, graph: Graph, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        _, executor = self.program(graph, roots, False, dims)
        return _typed(graph, roots, executor.run(feeds, dims, list(roots)))

    def step(
        self, graph: Graph, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        _, executor = self.program(graph, roots, True, dims)
        return _typed(graph, roots, executor.run(feeds, dims, list(roots), step=True))

    def step_into(
        self, graph: Graph, loss: int, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], sink, index: int
    ) -> None:
        """A training step that leaves its loss in float `index` of the GPU buffer `sink`
        (read later, many steps at once) instead of reading it back."""
        _, executor = self.program(graph, [loss], True, dims)
        executor.step_into(feeds, dims, loss, sink, index)

    def memory(self) -> dict[str, tuple[int, int]]:
        """GPU buffers and bytes this backend holds, by what they hold: "params", "state"
        (optimizer state), "data" (training data kept on the GPU), "snapshots" (copies of
        params and state to undo a diverged step) and "slots" (the programs' planned storage)."""
        state = {s.name for _, _, ex in self._programs.values() for s in ex.slots if s.kind == "state"}
        out = {k: (0, 0) for k in ("params", "state", "data", "snapshots", "slots")}

        def add(kind: str, count: int, nbytes: int) -> None:
            out[kind] = (out[kind][0] + count, out[kind][1] + nbytes)

        for name, buf in self.store.buffers.items():
            kind = "data" if self.store.is_data(name) else "state" if name in state else "params"
            add(kind, 1, buf.capacity)
        snaps = self.store.snapshot_buffers()
        add("snapshots", len(snaps), sum(b.capacity for b in snaps))
        for _, _, executor in self._programs.values():
            add("slots", *executor.buffer_bytes())
        return out

    def close(self) -> None:
        """Free every GPU buffer this backend holds."""
        for _, _, executor in self._programs.values():
            executor.delete()
        self._programs.clear()
        self.store.delete()


def batch_dims(graph: Graph, roots: Sequence[int]) -> tuple[str, ...]:
    """The symbolic leading dims of the inputs `roots` read: what a batch's size binds."""
    nodes = (graph.nodes[i] for i in cone(graph, roots))
    return tuple(sorted({n.shape[0] for n in nodes if n.op == "input" and n.shape and isinstance(n.shape[0], str)}))


def batch_class(size: int) -> int:
    """0 for a batch of 1, 1 for 2-15, 2 for 16-127, 3 for 128-1023, ..."""
    return (int(size).bit_length() + 1) // 3


def _typed(graph: Graph, roots: Sequence[int], values: list) -> list:
    """Values read back from GL storage as their element types (i32 ones come as float bits)."""
    return [from_storage(v, graph.dtypes[r]) for r, v in zip(roots, values)]
