"""Runs a texture-target program spec (see `compiler/codegen/texture.py`): each kernel is one
render pass per output into float textures.

Mirrors `runtime/executor.py` (same spec fields: slots, tensors, kernels with their reads,
writes and dims; same `run`), with textures for buffers. A pass never renders into a texture
it reads: when a kernel writes a slot it also reads (in-place updates, reused slots), its
passes render into spare textures that replace the slots' textures once the kernel is done.
It imports neither the compiler nor lark.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from dlc.runtime.device import require_default
from dlc.runtime.errors import DataError, RuntimeFailure
from dlc.runtime.executor import PERSISTENT, LeafStore, bind_shape, eval_size, needs, outputs_info
from dlc.runtime.spec import FORMAT, Kernel, ProgramSpec
from dlc.runtime.textures import FragmentProgram, Texture, copy, packed_layout

_SAMPLER = re.compile(r"^uniform sampler2D b(\d+);", re.MULTILINE)


class TextureStore(LeafStore):
    """Params and optimizer state as textures by name: the texture target's LeafStore (its
    storage hooks make textures; snapshots and restores are texture copies)."""

    def __init__(self) -> None:
        super().__init__()
        require_default(self.device, "the texture target")  # textures do not make their device current

    def _allocate(self, data: np.ndarray, name: str, shape: tuple) -> Texture:
        return Texture(data.size, f"'{name}' {list(shape)}")

    def _fits(self, storage: Texture, data: np.ndarray) -> bool:
        return data.size <= storage.count <= max(2 * data.size, 16)

    def _like(self, storage: Texture, old: Texture | None) -> Texture:
        if old is not None and (old.width, old.height) == (storage.width, storage.height):
            return old
        if old is not None:
            old.delete()
        return Texture(storage.count)

    def _copy_all(self, pairs: list) -> None:
        for dst, src in pairs:
            copy(dst, src)

    def replace(self, name: str, tex: Texture) -> Texture:
        """Put `tex` in place of leaf `name`'s texture (same layout); return the old one."""
        old = self.buffers[name]
        self.buffers[name] = tex
        self.version += 1
        return old


class TextureExecutor:
    """Runs one texture program spec against a TextureStore (the interface of `Executor`)."""

    def __init__(self, spec: ProgramSpec, sources: Mapping[str, str], store: TextureStore, hook=None):
        if spec.format != FORMAT or spec.target != "texture":
            raise RuntimeFailure("internal dlc error: not a texture-target program spec")
        self.spec = spec
        self.store = store
        self.hook = hook
        self.kernels: tuple[Kernel, ...] = spec.kernels
        self.programs: list[list[FragmentProgram]] = [
            [FragmentProgram(sources[p.file], f"{k.name}:{p.tensor}") for p in k.passes] for k in self.kernels
        ]
        for passes in self.programs:  # the texture units each pass samples
            for program in passes:
                program.units = [int(u) for u in _SAMPLER.findall(program.source)]
        self.slots = spec.slots
        self.tensors = spec.tensors
        self.buffers: dict[int, Texture] = {}
        self._spare: dict[tuple[int, int], list[Texture]] = {}
        self._scratch: dict[int, Texture] = {}  # kernel -> its partials (split reductions)
        # texture_matmul's packed textures (operands, products): live only while their kernel
        # runs, so every kernel draws them from one pool by size
        self._packed_size: dict[tuple[int, int], tuple[int, int]] = {}  # (kernel, unit) -> size
        self._packed: dict[tuple[int, int], list[Texture]] = {}  # size -> free textures
        for s, slot in enumerate(self.slots):
            if slot.kind == "const":
                values = np.asarray(slot.values, np.float32)
                self.buffers[s] = Texture(values.size, self._what(s, {}))
                self.buffers[s].upload(values)
        self._dims: dict[str, int] = {}

    def _what(self, s: int, dims: Mapping[str, int]) -> str:
        def shape(info) -> str:
            text = "[" + ", ".join(str(d) for d in info.shape) + "]"
            if any(isinstance(d, str) for d in info.shape) and dims:
                text += f" = {list(bind_shape(info.shape, dims))}"
            return text

        names = [f"'{i.label}' {shape(i)}" for i in self.tensors.values() if i.slot == s]
        return "tensor " + (", ".join(names[:3]) if names else f"slot {s}")

    def slot_buffer(self, s: int) -> Texture:
        slot = self.slots[s]
        if slot.kind in PERSISTENT:
            return self.store.buffer(slot.name)
        return self.buffers[s]

    def prepare(self, dims: Mapping[str, int]) -> None:
        """Size the temp and input slots' textures for this binding of the dims."""
        dims = {d: int(v) for d, v in dims.items()}
        for s, slot in enumerate(self.slots):
            if slot.kind in ("temp", "input"):
                need = max(eval_size(z, dims) for z in slot.sizes)
                tex = self.buffers.get(s)
                if tex is None or tex.count < need:
                    if tex is not None:
                        tex.delete()
                    self.buffers[s] = Texture(need, self._what(s, dims))
        for k, spec in enumerate(self.kernels):  # split reductions' partial results
            if spec.scratch is not None:
                need = eval_size(spec.scratch.size, dims)
                tex = self._scratch.get(k)
                if tex is None or tex.count < need:
                    if tex is not None:
                        tex.delete()
                    self._scratch[k] = Texture(need, f"the partial results of {spec.name}")
            for q in spec.packed:  # rows of ceil(depth / 4) RGBA texels
                what = f"the packed copy of {q.label or 'an operand'} in kernel {spec.name}"
                self._packed_size[k, q.unit] = packed_layout(eval_size(q.rows, dims), eval_size(q.depth, dims), what)
        self._dims = dims

    def needs(self, fetch: Sequence[int], step: bool = False) -> tuple[list[int], set[str]]:
        """The kernels to run for `fetch` (all for a step) and the inputs they read."""
        return needs(self.spec, fetch, step)

    def run(
        self, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], fetch: Sequence[int], *, step: bool = False
    ) -> list[np.ndarray]:
        self.prepare(dims)
        kernels, names = self.needs(fetch, step)
        self._upload(feeds, names)
        self._launch(kernels)
        out = [self._download(t) for t in fetch]
        if step:
            for c in self.spec.copies:
                info = self.tensors[c.tensor]
                copy(
                    self.store.buffer(c.target),
                    self.slot_buffer(info.slot),
                    math.prod(bind_shape(info.shape, self._dims)),
                )
        return out

    def upload(self, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> None:
        self.prepare(dims)
        self._upload(feeds, set(feeds))

    def launch(self, kernels: Sequence[int] | None = None) -> None:
        self._launch(range(len(self.kernels)) if kernels is None else kernels)

    def _upload(self, feeds: Mapping[str, np.ndarray], names: set[str]) -> None:
        for s, slot in enumerate(self.slots):
            if slot.kind == "input" and slot.name in names:
                if slot.name not in feeds:
                    raise DataError(f"input '{slot.name}' is missing")
                self.buffers[s].upload(feeds[slot.name])

    def _launch(self, kernels) -> None:
        from dlc.runtime.textures import render_pass

        hook = self.hook
        before = getattr(hook, "before", None)
        dims = self._dims
        for k in kernels:
            spec = self.kernels[k]
            if before is not None:
                before(spec.name)
            samplers = {unit: self.slot_buffer(s) for unit, s in enumerate(spec.slots)}
            if spec.scratch is not None:
                samplers[spec.scratch.unit] = self._scratch[k]
            packed = [self._take_packed(self._packed_size[k, q.unit]) for q in spec.packed]
            samplers.update((q.unit, tex) for q, tex in zip(spec.packed, packed))
            # the slots any pass samples (from the shaders, not the spec's "reads"): written
            # through spares, as a later pass may read what an earlier one wrote
            units = {u for program in self.programs[k] for u in program.units}
            read = {s for u, s in enumerate(spec.slots) if u in units}
            ints = {u: dims[d] for u, d in spec.uniforms.items()}
            floats = {u: float(np.asarray(self._scalar(n)).reshape(-1)[0]) for u, n in spec.scalars.items()}
            swaps = []
            for p, program in zip(spec.passes, self.programs[k]):
                used = {u: samplers[u] for u in program.units}
                if p.into is not None:  # a packed texture (texture_matmul)
                    target = samplers[p.into]
                    render_pass(program, target, used, {**ints, "dlc_width": target.width}, floats)
                    continue
                if p.tensor is None:  # a split reduction's partials
                    target = self._scratch[k]
                    render_pass(program, target, used, {**ints, "dlc_width": target.width}, floats)
                    continue
                s = self.tensors[p.tensor].slot
                target = self.slot_buffer(s)
                if s in read:  # never render into a texture being read: a spare, swapped in after
                    target = self._take_spare(target)
                    swaps.append((s, target))
                render_pass(program, target, used, {**ints, "dlc_width": target.width}, floats)
            for tex in packed:
                self._packed[tex.width, tex.height].append(tex)
            for s, tex in swaps:
                slot = self.slots[s]
                if slot.kind in PERSISTENT:
                    old = self.store.replace(slot.name, tex)
                else:
                    old, self.buffers[s] = self.buffers[s], tex
                self._spare.setdefault((old.width, old.height), []).append(old)
            if hook is not None:
                hook(spec.name, outputs_info(spec, self.tensors, self._dims, self.slot_buffer))

    def _scalar(self, name: str):
        raise RuntimeFailure(f"the texture target does not take the number input '{name}'")

    def _take_packed(self, size: tuple[int, int]) -> Texture:
        pool = self._packed.setdefault(size, [])
        return pool.pop() if pool else Texture(size[0] * size[1], "a packed texture", channels=4, size=size)

    def _take_spare(self, like: Texture) -> Texture:
        pool = self._spare.get((like.width, like.height))
        return pool.pop() if pool else Texture(like.count)

    def _download(self, t: int) -> np.ndarray:
        info = self.tensors[t]
        shape = bind_shape(info.shape, self._dims)
        return self.slot_buffer(info.slot).download(math.prod(shape)).reshape(shape)

    def delete(self) -> None:
        for tex in self.buffers.values():
            tex.delete()
        self.buffers.clear()
        for pool in self._spare.values():
            for tex in pool:
                tex.delete()
        self._spare.clear()
        for tex in [*self._scratch.values(), *(t for pool in self._packed.values() for t in pool)]:
            tex.delete()
        self._scratch.clear()
        self._packed.clear()
        for passes in self.programs:
            for program in passes:
                program.delete()
        self.programs.clear()

    def buffer_bytes(self) -> tuple[int, int]:
        live = [t for t in self.buffers.values() if t.handle]
        live += [t for pool in self._spare.values() for t in pool if t.handle]
        live += [t for t in [*self._scratch.values(), *(t for pool in self._packed.values() for t in pool)] if t.handle]
        return len(live), sum(t.nbytes for t in live)
