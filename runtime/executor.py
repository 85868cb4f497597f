"""Runs a compiled program: the launches a program spec lists, over GPU storage slots.

A program spec (written by `dlc.compiler.pipeline`, stored in an artifact's manifest.json)
says everything: the slots and their sizes as products of symbolic dims, each kernel's GLSL
file, buffer bindings, dim uniforms and work-group grid, the update copies. This module
decides nothing: it binds dims to sizes, allocates, uploads feeds, launches, downloads the
fetches. It imports neither the compiler nor lark.

The spec is a `runtime.spec.ProgramSpec`. Per step the work is: upload the feeds, run the
prepared launches (runtime/launches.py: bindings, uniform values and group counts worked out
once per binding of the dims, then issued through raw ctypes entry points with no per-step
Python allocation), copy updates (prepared the same way), read back only the fetches.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from . import dims as dim_algebra
from .device import current_device, selected_device
from .dims import eval_size
from .elements import storage_floats
from .errors import DataError, RuntimeFailure
from .launches import Prepared, copy_calls, kernel_calls, launch_now, run_prepared
from .program import BARRIER_BITS, get_program, get_programs, on_delete, pin, unpin
from .readback import Readback
from .sizes import check_bound, check_kernel
from .spec import FORMAT, PERSISTENT, Grid, Kernel, ProgramSpec
from .storage import Buffer, OutOfMemory
from .sync import Fence

_MISSING = object()
_STORED = (np.dtype(np.float32), np.dtype(np.int32))  # written to GL as they are (int32 by its bits)
SNAPSHOTS = 3  # training keeps the last two snapshots; a third is being written

# Each device's `uniforms`: GL program handle -> uniform values last set on it (programs are
# shared between executors whose kernels have the same text, possibly under other dims).


def forget_uniforms(handle: int) -> None:
    """Uniforms of program `handle` were set elsewhere, or it was deleted: set them next time."""
    current_device().uniforms.pop(handle, None)


on_delete(forget_uniforms)


# Copies between buffers run as a compute shader: on the lent H200, glCopyBufferSubData moved
# 80 GB/s where a one-op kernel moved 4 TB/s (BENCHMARKS.md).
_COPY_SOURCE = """#version 430
// dlc runtime: copy n floats (n4 vec4s first, then the rest one by one)
layout(local_size_x = 256) in;
layout(std430, binding = 0) restrict readonly buffer S { vec4 v[]; } src4;
layout(std430, binding = 1) restrict writeonly buffer D { vec4 v[]; } dst4;
layout(std430, binding = 0) restrict readonly buffer S1 { float v[]; } src;
layout(std430, binding = 1) restrict writeonly buffer D1 { float v[]; } dst;
uniform int n;
void main() {
    int i = int((gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x
                + gl_WorkGroupID.x) * 256 + int(gl_LocalInvocationID.x);
    int n4 = n / 4;
    if (i < n4) dst4.v[i] = src4.v[i];
    else if (i - n4 < n % 4) dst.v[4 * n4 + i - n4] = src.v[4 * n4 + i - n4];
}
"""


# A range of one buffer to the start of another, by a kernel (ordered with the kernels around
# it like any other launch): a training step takes its batch's row indices this way.
_RANGE_COPY_SOURCE = """#version 430
// dlc runtime: copy n floats from float `first` of the source to the start of the destination
layout(local_size_x = 256) in;
layout(std430, binding = 0) restrict readonly buffer S { float v[]; } src;
layout(std430, binding = 1) restrict writeonly buffer D { float v[]; } dst;
uniform int n;
uniform int first;
void main() {
    int i = int((gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x
                + gl_WorkGroupID.x) * 256 + int(gl_LocalInvocationID.x);
    if (i < n) dst.v[i] = src.v[first + i];
}
"""


class GPUFeed(NamedTuple):
    """A feed already on the GPU: `count` floats of `buffer` from float `first`. A training
    step's row indices come this way from one upload of many steps' rows, so the step itself
    writes nothing from the host."""

    buffer: Buffer
    first: int
    count: int


def gpu_copy(dst: Buffer, src: Buffer, nbytes: int | None = None) -> None:
    """Copy `nbytes` (default all of `src`) from the start of `src` to the start of `dst`."""
    gpu_copy_many([(dst, src, nbytes)])


def copy_program(device=None):
    """The GL program that copies buffers on `device` (default: the current one), from its
    program cache."""
    return get_program(_COPY_SOURCE, "dlc_copy", device)


def copy_groups(n: int, max_count: Sequence[int]) -> tuple[int, int, int]:
    """The work groups copying `n` floats takes (a vec4 per invocation, 256 a group)."""
    return wrap_groups(-(-(n // 4 + 3) // 256), max_count)


def gpu_copy_many(copies: Sequence[tuple[Buffer, Buffer, int | None]]) -> None:
    """Independent copies (dst, src, nbytes or None for all of src), none reading what another
    writes: one program bind and one barrier for all of them (snapshots copy every leaf)."""
    device = copies[0][0].device.activate() if copies else current_device()  # the buffers' device
    prog = copy_program(device)
    limit = device.limits["max_work_group_count"]
    words = []
    for dst, src, nbytes in copies:
        n = (src.nbytes if nbytes is None else nbytes) // 4
        words.append((dst.handle, src.handle, n, copy_groups(n, limit)))
    device.uniforms.pop(prog.handle, None)
    for fn, args in copy_calls(device.fast, prog.handle, prog.uniform_location("n"), words):
        fn(*args)


def bind_shape(shape: Sequence, dims: Mapping[str, int]) -> tuple[int, ...]:
    return dim_algebra.bind(shape, dims)


class LeafStore:
    """Params and optimizer state on the GPU by name; they persist across steps and programs.

    `snapshot()` copies every leaf on the GPU into one of a small ring of buffer sets and
    returns a token; `restore(token)` copies it back (training undoes a step that diverged).
    Leaves set with `snapshot=False` (training data: read, never written) are left out.
    The storage is a `Buffer` a leaf; the texture target's TextureStore overrides the four
    storage hooks (`_allocate`, `_fits`, `_like`, `_copy_all`) and keeps the rest.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, Buffer] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.version = 0  # bumped when a buffer is replaced: launch records must be rebuilt
        self._ring: list[dict[str, Buffer]] = [{} for _ in range(SNAPSHOTS)]
        self._ring_gen = [0] * SNAPSHOTS
        self._taken = 0
        self._unsnapshotted: set[str] = set()
        self.device = selected_device()  # the GL device its buffers live on

    # -- storage hooks ---------------------------------------------------------------------
    def _allocate(self, data: np.ndarray, name: str, shape: tuple) -> Buffer:
        return Buffer(data.nbytes, device=self.device)

    def _fits(self, storage: Buffer, data: np.ndarray) -> bool:
        return storage.nbytes == data.nbytes

    def _like(self, storage: Buffer, old: Buffer | None) -> Buffer:
        """A snapshot copy of `storage`: the previous one, `old`, when it has the same layout, else a new one."""
        if old is not None and old.nbytes == storage.nbytes:
            return old
        if old is not None:
            old.delete()
        return Buffer(storage.nbytes, device=self.device)

    def _copy_all(self, pairs: list) -> None:
        """(dst, src) copies on the GPU, none reading what another writes."""
        gpu_copy_many([(dst, src, None) for dst, src in pairs])

    # -- leaves ----------------------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.buffers

    def set(self, name: str, value, *, snapshot: bool = True) -> None:
        shape = np.shape(value)  # ascontiguousarray makes a 0-d array 1-d: keep the real shape
        data = storage_floats(value)  # an i32 leaf's ints by their bits
        buf = self.buffers.get(name)
        if buf is None or not self._fits(buf, data):
            if buf is not None:
                buf.delete()
            buf = self._allocate(data, name, shape)
            self.buffers[name] = buf
            self.version += 1
        buf.upload(data)
        self.shapes[name] = shape
        if snapshot:
            self._unsnapshotted.discard(name)
        else:
            self._unsnapshotted.add(name)

    def drop(self, name: str) -> None:
        """Free leaf `name` (programs reading it then need it set again)."""
        buf = self.buffers.pop(name, None)
        if buf is not None:
            buf.delete()
            self.version += 1
        self.shapes.pop(name, None)
        self._unsnapshotted.discard(name)

    def get(self, name: str) -> np.ndarray:
        buf = self.buffer(name)
        shape = self.shapes[name]
        return buf.download(math.prod(shape)).reshape(shape)

    def buffer(self, name: str) -> Buffer:
        try:
            return self.buffers[name]
        except KeyError:
            raise RuntimeFailure(f"'{name}' has no value on the GPU yet (set it first)") from None

    def snapshot(self) -> tuple[int, int]:
        self._taken += 1
        slot = self._taken % SNAPSHOTS
        ring = self._ring[slot]
        names = [n for n in self.buffers if n not in self._unsnapshotted]
        for name in set(ring) - set(names):  # no longer snapshotted: restore must skip it
            ring.pop(name).delete()
        pairs = []
        for name in names:
            buf = self.buffers[name]
            copy = ring[name] = self._like(buf, ring.get(name))
            pairs.append((copy, buf))
        self._copy_all(pairs)
        self._ring_gen[slot] = self._taken
        return (slot, self._taken)

    def restore(self, token: tuple[int, int]) -> None:
        slot, gen = token
        if self._ring_gen[slot] != gen:
            raise RuntimeFailure("internal dlc error: restoring a snapshot that was overwritten")
        self._copy_all([(self.buffers[name], copy) for name, copy in self._ring[slot].items() if name in self.buffers])

    def snapshot_buffers(self) -> list[Buffer]:
        """The buffers snapshots are kept in (for memory reports)."""
        return [buf for ring in self._ring for buf in ring.values() if buf.handle]

    def is_data(self, name: str) -> bool:
        """Whether leaf `name` was set with `snapshot=False` (data, not a param or state)."""
        return name in self._unsnapshotted

    def delete(self) -> None:
        for buf in self.buffers.values():
            buf.delete()
        for ring in self._ring:
            for buf in ring.values():
                buf.delete()
            ring.clear()
        self.buffers.clear()


Hook = Callable[[str, list], None]


def needs(spec: ProgramSpec, fetch: Sequence[int], step: bool = False) -> tuple[list[int], set[str]]:
    """The kernels of `spec` to run for `fetch` (all of them for a step), in schedule order,
    and the inputs they and the fetched tensors read (both targets' executors)."""
    kernels = list(range(len(spec.kernels))) if step else needed_kernels(spec, fetch)
    names = {n for k in kernels for n in spec.kernels[k].inputs}
    for t in fetch:
        slot = spec.slots[spec.tensors[t].slot]
        if slot.kind == "input":
            names.add(slot.name)
    return kernels, names


def needed_kernels(spec: ProgramSpec, fetch: Sequence[int]) -> list[int]:
    """The kernels that `fetch` depends on, in schedule order."""
    want: set[int] = set()
    stack = [spec.producer[t] for t in fetch if t in spec.producer]
    while stack:
        k = stack.pop()
        if k not in want:
            want.add(k)
            stack.extend(spec.kernels[k].after)
    return sorted(want)


class Executor:
    """Runs one program spec (a `ProgramSpec`) against a LeafStore.

    `hook`, when set, is called after every launch as `hook(kernel_name, outputs)` where
    `outputs` lists dicts {tensor, label, buffer, count, shape, ir, locs} of what the kernel
    wrote (debug mode checks them for NaN); if the hook has a `before(kernel_name)` method it
    is called before the launch (debug mode starts a timer there).
    """

    def __init__(self, spec: ProgramSpec, sources: Mapping[str, str], store: LeafStore, hook: Hook | None = None):
        if spec.format != FORMAT:
            raise RuntimeFailure(f"program format {spec.format} is not one this dlc runs")
        self.spec = spec
        self.store = store
        self.hook = hook
        self.device = store.device.activate()  # programs and buffers go on the store's device
        self.limits = self.device.limits
        self.kernels: tuple[Kernel, ...] = spec.kernels
        for k in self.kernels:
            check_kernel(k.name, sources[k.file], k.local_size or (1, 1, 1), self.limits)  # none listed: GL checks
        # Linked together (a driver may compile them at once), then pinned before anything
        # else can evict them.
        self.programs = get_programs([(sources[k.file], k.name) for k in self.kernels], self.device)
        for program in self.programs:
            pin(program)
        self._copy_program = None
        if spec.copies:  # the update copies are prepared too: keep their program linked
            self._copy_program = copy_program(self.device)
            pin(self._copy_program)
            self.programs.append(self._copy_program)
        # An executor dropped without delete() unpins its programs (no GL call: a finalizer
        # may run on any thread; the cache evicts them at its next insertion).
        weakref.finalize(self, _release_pins, self.programs)
        self.slots = spec.slots
        self.tensors = spec.tensors
        self._all = list(range(len(self.kernels)))
        self._inputs = tuple((s, slot.name) for s, slot in enumerate(self.slots) if slot.kind == "input")
        self._needs: dict[tuple, tuple[list[int], set[str]]] = {}
        self._step_needs: dict[int, tuple[list[int], set[str]]] = {}  # step_into's, by loss tensor
        self.buffers: dict[int, Buffer] = {}  # temp, input and const slots
        # step_into: input slot -> the feed object it holds (the same object again is not
        # written again), and whether steps were queued since the host last waited for them.
        self._held: dict[int, object] = {}
        self._in_flight = False
        self._range_program = None  # copies GPUFeed ranges into input slots (pinned on first use)
        self.scratch: dict[int, Buffer] = {}  # kernel index -> its scratch (split reductions)
        for s, slot in enumerate(self.slots):
            if slot.kind == "const":
                self.buffers[s] = Buffer.from_array(np.asarray(slot.values, np.float32))
        self._dims: tuple | None = None
        self._dim_values: tuple[tuple[str, int], ...] = ()  # the binding prepared, for a cheap check
        self._version = -1
        self._launches: list[Prepared] = []  # one per kernel, for the binding prepared
        self._subsets: dict[int, tuple] = {}  # id of a kernel list -> (the list, its launches)
        self._copies: tuple = ()  # the update copies' calls
        # Bindings prepared before (an epoch's last, smaller batch and back), by dims key:
        # valid while no buffer they bind was replaced (`_stamp`).
        self._bindings: dict[tuple, tuple] = {}
        self._generation = 0  # bumped when a slot or scratch buffer is reallocated
        # Debug-mode kernels (spec nan_flags) set a float per checked node when it is NaN;
        # one buffer serves them all, bound after a kernel's slots (dlc/debug.py reads it).
        flags = max((len(k.nan_flags) for k in self.kernels), default=0)
        self.nan_buffer = Buffer(4 * flags, zero=True) if flags else None
        # run()'s reads: fetch list -> ((binding, stamp), (buffer handle, floats) each, shapes)
        self._reads: dict[tuple, tuple] = {}
        self._readback: Readback | None | bool = None  # made on the first read; False: none here
        # run() without a step: fetch list -> `_bind_eval`'s tuple, valid while the launch list
        # prepared for the binding (replaced whenever a buffer it binds is) and the readback hold
        self._evals: dict[tuple, tuple] = {}

    # -- the dims binding -----------------------------------------------------------------
    def slot_buffer(self, s: int) -> Buffer:
        slot = self.slots[s]
        if slot.kind in PERSISTENT:
            return self.store.buffer(slot.name)
        return self.buffers[s]

    def _prepared(self, dims: Mapping[str, int]) -> bool:
        """Whether the launches are prepared for `dims` (no allocation: the steady state)."""
        if self._version != self.store.version:
            return False
        for d, v in self._dim_values:
            if dims.get(d) != v:
                return False
        return True

    def _stamp(self) -> tuple[int, int]:
        return (self.store.version, self._generation)

    def prepare(self, dims: Mapping[str, int]) -> None:
        """Size the slots and resolve every launch for this binding (no-op when unchanged)."""
        self.device.activate()
        if self._dims is not None and self._prepared(dims):
            return
        key = tuple(sorted((d, int(v)) for d, v in dims.items() if d in self.spec.dims))
        found = self._bindings.get(key)
        if found is not None and found[0] == self._stamp():
            _, self._dim_values, self._launches, self._subsets, self._copies = found
            self._dims, self._version = key, self.store.version
            return
        values = tuple((d, int(dims[d]) if d in dims else None) for d in self.spec.dims)
        if key != self._dims:
            check_bound(self.spec, dims, self.limits["max_ssbo_size"])
        for s, slot in enumerate(self.slots):
            if slot.kind in ("temp", "input"):
                need = 4 * max(eval_size(z, dims) for z in slot.sizes)
                buf = self.buffers.get(s)
                if buf is None or buf.nbytes < need:
                    if buf is not None:
                        buf.delete()
                        del self.buffers[s]
                    self.buffers[s] = self._allocate(need, s)
                    self._held.pop(s, None)
                    self._generation += 1
        max_count = self.limits["max_work_group_count"]
        launches = []
        for index, (k, prog) in enumerate(zip(self.kernels, self.programs)):
            handles = [self.slot_buffer(s).handle for s in k.slots]
            words = scratch_words(k.grid, dims)
            if words:  # a split reduction's counters and partials, bound after the slots
                buf = self.scratch.get(index)
                if buf is None or buf.nbytes < 4 * words:
                    if buf is not None:
                        buf.delete()
                    buf = self.scratch[index] = Buffer(4 * words, zero=True)
                    self._generation += 1
                handles.append(buf.handle)
            if k.nan_flags:  # debug mode's NaN flags, bound after the slots and scratch
                handles.append(self.nan_buffer.handle)
            uniforms = [(prog.uniform_location(u), int(dims[d])) for u, d in k.uniforms.items()]
            if k.grid.tiles is not None:  # a tiled kernel's tile counts (uniforms where symbolic)
                tiles = tile_counts(k.grid, dims)
                uniforms += [(prog.uniform_location(f"dlc_tiles_{axis}"), n) for axis, n in zip("xyz", tiles)]
            try:
                groups = group_counts(k.grid, dims, max_count)
            except RuntimeFailure as e:
                raise RuntimeFailure(f"kernel '{k.name}': {e}") from None
            launches.append(
                kernel_calls(self.device.fast, prog.handle, [u for u in uniforms if u[0] >= 0], handles, groups)
            )
        self._launches = launches
        self._subsets = {}
        self._dims = key
        self._dim_values = values
        self._version = self.store.version
        self._copies = ()
        if self.spec.copies:
            words = []
            for c in self.spec.copies:
                info = self.tensors[c.tensor]
                n = math.prod(bind_shape(info.shape, dims))
                words.append(
                    (
                        self.store.buffer(c.target).handle,
                        self.slot_buffer(info.slot).handle,
                        n,
                        copy_groups(n, max_count),
                    )
                )
            copier = self._copy_program
            self._copies = copy_calls(self.device.fast, copier.handle, copier.uniform_location("n"), words)
        if len(self._bindings) >= 8:  # a few bindings alternate in practice: keep those
            self._bindings.clear()
        self._bindings[key] = (self._stamp(), values, launches, self._subsets, self._copies)

    def _allocate(self, nbytes: int, slot: int) -> Buffer:
        """A buffer for `slot`; out of GPU memory is reported naming the program and bytes."""
        try:
            return Buffer(nbytes)
        except OutOfMemory:
            held = sum(b.nbytes for b in self.buffers.values() if b.handle)
            labels = [info.label for info in self.tensors.values() if info.slot == slot]
            raise OutOfMemory(
                f"out of GPU memory running program '{self.spec.name}': allocating "
                f"{nbytes:,} bytes for {', '.join(repr(x) for x in labels) or 'a buffer'} with "
                f"{held:,} bytes of its buffers already held",
                nbytes,
            ) from None

    # -- running ---------------------------------------------------------------------------
    def needs(self, fetch: Sequence[int], step: bool = False) -> tuple[list[int], set[str]]:
        """The kernels to launch for `fetch` (all of them for a step) and the inputs they read;
        fixed per program, so worked out once per fetch list."""
        key = (tuple(fetch), step)
        found = self._needs.get(key)
        if found is None:
            found = self._needs[key] = needs(self.spec, fetch, step)
        return found

    def run(
        self, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], fetch: Sequence[int], *, step: bool = False
    ) -> list[np.ndarray]:
        """Upload feeds, run the launches `fetch` needs (all of them and the updates when
        `step`), return the fetched tensors."""
        self.prepare(dims)  # makes the device current: nothing below activates it again
        if not step and self.hook is None and self._readback is not False:  # False: no mapped readback
            bound = self._evals.get(tuple(fetch))
            if bound is None or bound[0] is not self._launches or bound[4] is not self._readback:
                bound = self._bind_eval(fetch)
            if bound is not None:
                return self._run_bound(feeds, bound)
        kernels, inputs = self.needs(fetch, step)
        self._upload(feeds, inputs)
        self._launch(kernels)
        out = self._read(fetch)
        if step:
            self._copy_updates()
        return out

    def _bind_eval(self, fetch: Sequence[int]) -> tuple | None:
        """What `run` without a step does for `fetch` at the binding prepared, worked out once:
        (the binding's launch list, its token; the input slots to write as (slot, name,
        buffer); the launches with their barriers; the reads; the readback buffer; the raw
        glNamedBufferSubData where the driver has direct state access). None
        where the driver cannot map a readback (each fetch is then downloaded)."""
        kernels, inputs = self.needs(fetch, False)
        sources, shapes, floats = self._read_plan(fetch)
        readback = self._readback_for(floats)
        if readback is None:
            return None
        uploads = tuple((s, name, self.buffers[s]) for s, name in self._inputs if name in inputs)
        fast = self.device.fast
        write = fast.buffer_sub_data if fast._resolved and self.device.context.has_dsa else None
        launches = self._with_barriers(kernels)
        if len(self._evals) > 16:  # fetch lists alternate little in practice
            self._evals.clear()
        reads = (sources, shapes)
        bound = self._evals[tuple(fetch)] = (self._launches, uploads, launches, reads, readback, write)
        return bound

    def _run_bound(self, feeds: Mapping[str, np.ndarray], bound: tuple) -> list[np.ndarray]:
        """`run` of a `_bind_eval` result: write the inputs, launch, read in one wait."""
        _, uploads, launches, (sources, shapes), readback, write = bound
        if uploads:
            if self._in_flight:  # see step_into: no host write while queued steps may read
                Fence().wait()
                self._in_flight = False
            held = self._held
            for s, name, buffer in uploads:
                value = feeds.get(name, _MISSING)
                if value is _MISSING:
                    raise DataError(f"input '{name}' is missing")
                if (
                    write is not None
                    and type(value) is np.ndarray
                    and value.dtype in _STORED
                    and value.flags.c_contiguous
                    and value.nbytes <= buffer.nbytes
                ):  # as GL stores it, and it fits (the feeds were checked): its memory written as it is
                    write(buffer.handle, 0, value.nbytes, value.ctypes.data)
                else:
                    buffer.upload(value)
                held[s] = None
        run_prepared(self.device.fast, launches, self.device.uniforms)
        return readback.read_current(sources, shapes)  # current: prepare made it so

    def step_into(
        self, feeds: Mapping[str, object], dims: Mapping[str, int], loss: int, sink: Buffer, index: int
    ) -> None:
        """A training step whose scalar `loss` tensor is copied on the GPU into float `index`
        of `sink`: nothing is read back, so many steps queue before one read.

        A feed may be a `GPUFeed` (copied on the GPU into its slot, in order with the
        kernels), or the very object this slot took last time (not written again: the caller
        owns it and does not change it). Anything else is uploaded from the host, after
        waiting for the steps queued before: NVIDIA's driver let glBufferSubData race with
        in-flight dispatches still reading the slot (training diverged from numpy on the
        H100), and no glMemoryBarrier orders a host write."""
        self.prepare(dims)
        found = self._step_needs.get(loss)
        if found is None:
            found = self._step_needs[loss] = self.needs([loss], True)
        kernels, inputs = found
        self._upload(feeds, inputs, keep=True)
        self._launch(kernels)
        sink.copy_from(self.slot_buffer(self.tensors[loss].slot), 4, 0, 4 * index)
        self._copy_updates()
        self._in_flight = True

    def _copy_updates(self) -> None:
        """The step's update copies (prepared with the launches)."""
        if self._copies:
            self.device.uniforms.pop(self._copy_program.handle, None)  # its 'n' is set per copy
            for fn, args in self._copies:
                fn(*args)

    def upload(self, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]) -> None:
        """Size the slots for `dims` and upload every input in `feeds` (benchmarks then call
        `launch` repeatedly without moving data)."""
        self.prepare(dims)
        self._upload(feeds, set(feeds))

    def launch(self, kernels: Sequence[int] | None = None) -> None:
        """Dispatch `kernels` (default: all) on the data already in place; no sync."""
        self.device.activate()
        self._launch(self._all if kernels is None else kernels)

    def _upload(self, feeds: Mapping[str, object], names: set[str], keep: bool = False) -> None:
        """Write the input slots `names` from `feeds`. `keep` (step_into): a slot given the
        object it took last time is left as it is, and GPUFeed values are copied on the GPU."""
        held = self._held
        for s, name in self._inputs:
            if name not in names:
                continue
            value = feeds.get(name, _MISSING)
            if value is _MISSING:
                raise DataError(f"input '{name}' is missing")
            if keep:
                if value is held.get(s):
                    continue
                if type(value) is GPUFeed:
                    self._copy_range(value, self.buffers[s])
                    held[s] = value
                    continue
            if self._in_flight:  # see step_into: no host write while queued steps may read
                Fence().wait()
                self._in_flight = False
            self.buffers[s].upload(value)  # upload makes it contiguous float32
            held[s] = value if keep else None

    def _copy_range(self, feed: GPUFeed, dst: Buffer) -> None:
        """Copy a GPUFeed's floats into `dst` with a kernel (ordered with the launches)."""
        program = self._range_program
        if program is None:
            program = self._range_program = get_program(_RANGE_COPY_SOURCE, "dlc_copy_range", self.device)
            pin(program)
            self.programs.append(program)
        n = int(feed.count)
        if n == 0:
            return
        groups = wrap_groups(-(-n // 256), self.limits["max_work_group_count"])
        uniforms = ((program.uniform_location("n"), n), (program.uniform_location("first"), int(feed.first)))
        handles = (feed.buffer.handle, dst.handle)
        launch_now(self.device.fast, program.handle, uniforms, handles, groups, self.device.uniforms)

    def _launch(self, kernels: Sequence[int]) -> None:
        if self.hook is not None:
            self._launch_hooked(kernels)
            return
        # The launches of this kernel list, prepared once per binding of the dims: a list
        # `needs` returned is the same object every step, so its id is the cache key.
        launches = self._subsets.get(id(kernels))
        if launches is None or launches[0] is not kernels:
            if len(self._subsets) > 64:  # lists made by callers, not `needs`: keep few
                self._subsets.clear()
            launches = self._subsets[id(kernels)] = (kernels, self._with_barriers(kernels))
        run_prepared(self.device.fast, launches[1], self.device.uniforms)  # current: see prepare

    def _with_barriers(self, kernels: Sequence[int]) -> tuple[Prepared, ...]:
        """The launches of `kernels` with a barrier only where one is needed: before a kernel
        that reads a slot written since the last barrier, or writes one read or written since
        (planned storage reuses slots: a write-after-read counts), and after the last. Kernels
        between two barriers may then run at once (the three parameter updates of the
        quadratic, the weight updates of an MLP)."""
        launches = [self._launches[k] for k in kernels]
        barrier = [True] * len(kernels)  # a launch without a dispatch has none to drop
        written: set[int] = set()
        bound: set[int] = set()
        last = None  # the position of the last launch that dispatches
        for i, k in enumerate(kernels):
            if not all(launches[i].groups):
                continue
            kernel = self.kernels[k]
            reads = set(kernel.slots)
            writes = {self.tensors[t].slot for t in kernel.writes}
            if last is not None:
                barrier[last] = bool(reads & written or writes & (written | bound))
                if barrier[last]:
                    written, bound = set(), set()
            written |= writes
            bound |= reads
            last = i
        return tuple(launch if keep else _without_barrier(launch) for launch, keep in zip(launches, barrier))

    def _launch_hooked(self, kernels: Sequence[int]) -> None:
        """Debug mode: one launch at a time, the hook around each."""
        hook = self.hook
        before = getattr(hook, "before", None)
        for k in kernels:
            name = self.kernels[k].name
            if before is not None:
                before(name)
            run_prepared(self.device.fast, (self._launches[k],), self.device.uniforms)
            hook(name, self._outputs_info(self.kernels[k]))

    def _outputs_info(self, k: Kernel) -> list[dict]:
        return outputs_info(k, self.tensors, dict(self._dims or ()), self.slot_buffer)

    def _read(self, fetch: Sequence[int]) -> list[np.ndarray]:
        """The fetched tensors, read in one wait through the mapped readback buffer (each
        downloaded on its own where the driver cannot map one); what to copy is worked out
        once per fetch list and binding of the dims."""
        sources, shapes, floats = self._read_plan(fetch)
        readback = self._readback_for(floats)
        if readback is None:
            dims = dict(self._dims or ())
            return [self._download(t, dims) for t in fetch]
        return readback.read(sources, shapes)

    def _read_plan(self, fetch: Sequence[int]) -> tuple[tuple, tuple, int]:
        """(buffer handle, floats) to copy for each fetch, their shapes and the floats in all,
        at the binding prepared."""
        key = tuple(fetch)
        found = self._reads.get(key)
        stamp = (self._dims, self._stamp())
        if found is None or found[0] != stamp:
            shapes = [bind_shape(self.tensors[t].shape, dict(self._dims or ())) for t in fetch]
            buffers = [self.slot_buffer(self.tensors[t].slot) for t in fetch]
            for buffer, shape in zip(buffers, shapes):  # a GL copy past the end would fail silently
                buffer._check_range(0, 4 * math.prod(shape), "download")
            sources = tuple((buffer.handle, math.prod(shape)) for buffer, shape in zip(buffers, shapes))
            if len(self._reads) > 16:  # fetch lists alternate little in practice
                self._reads.clear()
            found = self._reads[key] = (stamp, sources, tuple(shapes), sum(n for _, n in sources))
        return found[1], found[2], found[3]

    def _readback_for(self, floats: int) -> Readback | None:
        """The readback buffer, grown to hold `floats` (None: the driver cannot map one)."""
        readback = self._readback
        if readback is False:
            return None
        if readback is None or readback.floats < floats:
            if readback is not None:
                readback.delete()
            readback = self._readback = Readback.make(self.device, max(floats, 256)) or False
        return readback or None

    def _download(self, t: int, dims: Mapping[str, int]) -> np.ndarray:
        info = self.tensors[t]
        shape = bind_shape(info.shape, dims)
        return self.slot_buffer(info.slot).download(math.prod(shape)).reshape(shape)

    def delete(self) -> None:
        for buf in (*self.buffers.values(), *self.scratch.values()):
            buf.delete()
        self.buffers.clear()
        self.scratch.clear()
        if self.nan_buffer is not None:
            self.nan_buffer.delete()
            self.nan_buffer = None
        if self._readback:
            self._readback.delete()
        self._readback = None
        self._reads.clear()
        self._evals.clear()
        programs = list(self.programs)
        self.programs.clear()  # the finalizer's list too: unpinned once
        for program in programs:  # the cache may now evict them
            unpin(program)

    def buffer_bytes(self) -> tuple[int, int]:
        """GPU buffers this executor holds itself (temp, input and const slots, and the split
        reductions' and split-K products' scratch) and their bytes."""
        live = [b for b in (*self.buffers.values(), *self.scratch.values()) if b.handle]
        return len(live), sum(b.capacity for b in live)


def _without_barrier(launch: Prepared) -> Prepared:
    """`launch` without its closing glMemoryBarrier (kernel_calls puts one after a dispatch)."""
    if launch.calls and launch.calls[-1][1] == (BARRIER_BITS,):
        return launch._replace(calls=launch.calls[:-1])
    return launch


def _release_pins(programs: list) -> None:
    for program in programs:
        program.pins = max(program.pins - 1, 0)
    programs.clear()


def outputs_info(k: Kernel, tensors: Mapping, dims: Mapping[str, int], slot_buffer) -> list[dict]:
    """What debug mode's hook gets about kernel `k`'s outputs (see `Executor`)."""
    out = []
    for t in k.writes:
        info = tensors[t]
        shape = bind_shape(info.shape, dims)
        out.append(
            {
                "tensor": t,
                "label": info.label,
                "shape": shape,
                "count": math.prod(shape),
                "buffer": slot_buffer(info.slot),
                "ir": k.ir,
                "locs": k.locs,
                "kernel": k.name,
            }
        )
    return out


def chunks(grid: Grid, dims: Mapping[str, int]) -> int:
    """How many chunks a split reduction's grid cuts each output's reduction into (else 1)."""
    if grid.split is None:
        return 1
    size, chunk = grid.split
    return max(1, -(-eval_size(size, dims) // int(chunk)))


def scratch_words(grid: Grid, dims: Mapping[str, int]) -> int:
    """The 4-byte words of scratch a kernel needs bound after its slots (0: none): a counter
    per output, then `scratch` words per (output, chunk); for a tiled (split-K) grid, whose z
    axis numbers the K-chunks, a counter per tile, then `scratch` words per (tile element,
    chunk)."""
    if not grid.scratch:
        return 0
    if grid.tiles is not None:  # a split-K GEMM: a counter per tile, a partial tile per (tile, K-chunk)
        x, y, z = tile_counts(grid, dims)
        area = int(grid.tiles[0][1]) * int(grid.tiles[1][1])
        return x * y + x * y * z * area * int(grid.scratch)
    outputs = eval_size(grid.flat, dims)
    return outputs + outputs * chunks(grid, dims) * int(grid.scratch)


def group_counts(grid: Grid, dims: Mapping[str, int], max_count: Sequence[int]) -> tuple[int, int, int]:
    """The work groups to dispatch for `grid` under `dims`, within `max_count` per axis."""
    if grid.tiles is not None:  # tiled kernels decode their tile from a wrapped grid (codegen/compute.py tile_lines)
        tiles = tile_counts(grid, dims)
        if all(n <= m for n, m in zip(tiles, max_count)):
            return tiles
        return wrap_groups(math.prod(tiles), max_count)
    total = -(-eval_size(grid.flat, dims) // grid.per_group) * chunks(grid, dims)
    return wrap_groups(total, max_count)


def tile_counts(grid: Grid, dims: Mapping[str, int]) -> tuple[int, int, int]:
    x, y, z = (max(1, -(-eval_size(size, dims) // int(tile))) for size, tile in grid.tiles)
    return (x, y, z)


def wrap_groups(total: int, max_count: Sequence[int]) -> tuple[int, int, int]:
    """`total` work groups laid out on up to three axes, none over its limit. Flat kernels
    number their group (z * ny + y) * nx + x and return at once when it is past the end, so
    the few groups over `total` that filling out the grid adds do nothing."""
    mx, my, mz = (int(m) for m in max_count)
    x = min(max(total, 1), mx)
    rest = -(-total // x)
    y = min(max(rest, 1), my)
    z = max(1, -(-rest // y))
    if z > mz:
        raise RuntimeFailure(f"{total} work groups do not fit this GPU's grid of at most {mx} x {my} x {mz}")
    return (x, y, z)
