"""The storage plan: which GPU buffer ("slot") holds each stored tensor.

Leaves get slots of their own: one per input (uploaded each step), param and state
(persistent across steps and calls) and stored const (uploaded once). Tensors written by
kernels are temporaries with a live range over the schedule, [kernel that writes it, last
kernel that reads it] (to the end for fetches and update values); temporaries share a slot
when their ranges do not overlap, assigned greedily by size (largest first) at a reference
binding of the symbolic dims. A slot's size at run time is the largest of its tensors under
the actual binding, so the plan holds for every batch size.

Updates: the new value of a param or state is written by its kernel straight into the leaf's
slot when that is safe (nothing later reads the old value, and its kernel reads the old value
only element for element); otherwise it goes to a temporary and is copied after the kernels.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from dlc.runtime.dims import eval_size, shape_symbols

from .fusion import Fusion, reads_own_element
from .ir import Shape, format_shape
from .shapes import split_size

Size = tuple  # (int, *symbolic dim names): the product is an element count

DEFAULT_BATCH = 32  # the binding of symbolic dims a plan is drawn up at, unless told


def size_of(shape: Shape) -> Size:
    known, symbolic = split_size(shape)
    return (known, *symbolic)


def format_size(size: Size) -> str:
    """An element count as plans print it: `64`, `B` (not `B*1`), `B*64`."""
    known = [str(size[0])] if size[0] != 1 or len(size) == 1 else []
    return "*".join([*size[1:], *known])


def format_floats(sizes: tuple[Size, ...]) -> str:
    """`1 float`, `64 floats`, `B floats`, `B*64 | 10 floats`."""
    one = len(sizes) == 1 and len(sizes[0]) == 1 and sizes[0][0] == 1
    return " | ".join(format_size(z) for z in sizes) + (" float" if one else " floats")


@dataclass(frozen=True)
class Slot:
    index: int
    kind: str  # "temp" | "input" | "param" | "state" | "const"
    name: str | None  # the leaf's name (input, param, state)
    sizes: tuple[Size, ...]  # element counts of the tensors it holds
    node: int | None = None  # const: its node


@dataclass(frozen=True)
class Plan:
    fusion: Fusion
    slots: tuple[Slot, ...]
    slot_of: dict[int, int]  # stored tensor (aliases included) -> slot
    live: dict[int, tuple[int, int]]  # temporary -> (writer kernel, last reader; n = the end)
    inplace: tuple[tuple[str, int], ...]  # (param/state, tensor) written into its slot
    copies: tuple[tuple[str, int], ...]  # (param/state, tensor) copied after the kernels
    ref_dims: dict[str, int]

    def slot_bytes(self, slot: Slot, dims: Mapping[str, int] | None = None) -> int:
        dims = self.ref_dims if dims is None else dims
        return 4 * max((eval_size(s, dims) for s in slot.sizes), default=1)

    def peak_bytes(self, dims: Mapping[str, int] | None = None) -> dict[str, int]:
        """Bytes of temporaries as planned and with no reuse; bytes of leaves by kind."""
        dims = self.ref_dims if dims is None else dims
        out = {"planned": 0, "no_reuse": 0, "input": 0, "param": 0, "state": 0, "const": 0}
        for slot in self.slots:
            out["planned" if slot.kind == "temp" else slot.kind] += self.slot_bytes(slot, dims)
        g = self.fusion.graph
        out["no_reuse"] = 4 * sum(eval_size(size_of(g.nodes[t].shape), dims) for t in self.live)
        return out


def readers_by_kernel(f: Fusion) -> dict[int, list[int]]:
    """Stored tensor (by its base) -> the kernels that read it."""
    out: dict[int, list[int]] = {}
    for k in f.kernels:
        for i in k.inputs:
            out.setdefault(f.base(i), []).append(k.index)
    return out


def plan(f: Fusion, ref_dims: Mapping[str, int] | None = None) -> Plan:
    g = f.graph
    ref_dims = dict(ref_dims or {})
    for d in shape_symbols(n.shape for n in g.nodes):
        ref_dims.setdefault(d, DEFAULT_BATCH)
    end = len(f.kernels)
    readers = readers_by_kernel(f)

    slots: list[Slot] = []
    slot_of: dict[int, int] = {}
    by_name: dict[str, int] = {}

    def new_slot(kind: str, name: str | None, sizes: tuple[Size, ...], node=None) -> int:
        slots.append(Slot(len(slots), kind, name, sizes, node))
        return len(slots) - 1

    # Leaves, in node order so the plan reads like the model.
    for n, node in enumerate(g.nodes):
        if f.storage.get(n) != "leaf":
            continue
        if node.op == "const":
            slot_of[n] = new_slot("const", None, (size_of(node.shape),), n)
        else:
            name = node.attr("name")
            if name not in by_name:
                by_name[name] = new_slot(node.op, name, (size_of(node.shape),))
            slot_of[n] = by_name[name]
    # Update targets that the work does not read still need their slot.
    for target, _ in f.updates:
        if target not in by_name:
            node = g.node(target)
            by_name[target] = new_slot(node.op, target, (size_of(node.shape),))

    inplace, copies = _place_updates(f, readers)
    for target, u in inplace:
        slot_of[u] = by_name[target]

    # Temporaries: kernel outputs not written in place.
    keep_to_end = {f.base(r) for r in f.roots} | {f.base(u) for _, u in copies}
    live: dict[int, tuple[int, int]] = {}
    for k in f.kernels:
        for o in k.outputs:
            if o in slot_of:
                continue
            last = max(readers.get(o, [k.index]))
            live[o] = (k.index, end if o in keep_to_end else last)

    order = sorted(live, key=lambda t: (-eval_size(size_of(g.nodes[t].shape), ref_dims), live[t][0], t))
    members = first_fit(order, live, lambda t: eval_size(size_of(g.nodes[t].shape), ref_dims))
    for ts in members:
        sizes = tuple(dict.fromkeys(size_of(g.nodes[t].shape) for t in sorted(ts)))
        index = new_slot("temp", None, sizes)
        for t in ts:
            slot_of[t] = index

    # Aliases share their base's slot.
    for a in f.alias:
        slot_of[a] = slot_of[f.base(a)]
    return Plan(f, tuple(slots), slot_of, live, tuple(inplace), tuple(copies), ref_dims)


def first_fit(order: list[int], live: Mapping[int, tuple[int, int]], size) -> list[list[int]]:
    """Temp slots: each tensor of `order` (largest first, then by first use) goes to the first
    slot none of whose tensors is live while it is, else to a new slot.

    In n log n rather than n x slots: within a run of one size, first uses only grow, so each
    slot's next lifetime to end at or after the current first use `lo` is found by
    advancing a pointer (events in a heap), and the slot is free for [lo, hi] exactly when
    that lifetime starts after hi. A max segment tree over slots of those starts finds the
    first free slot in one descent. A new size (fewer than the tensors) rebuilds it."""
    n = max(1, len(order))
    width = 1 << (n - 1).bit_length()
    tree = [-1] * (2 * width)  # leaf width + s: the start of slot s's next lifetime (-1: none yet)
    never = len(order) + 2**31  # no lifetime left: free for any [lo, hi]
    members: list[list[int]] = []
    starts: list[list[int]] = []  # each slot's lifetimes, disjoint, sorted by start (and by end)
    ends: list[list[int]] = []
    ptr: list[int] = []  # each slot's first lifetime ending at or after lo
    events: list[tuple[int, int]] = []  # (end of a slot's pointed-to lifetime, slot)

    def put(slot: int, value: int) -> None:
        i = width + slot
        tree[i] = value
        i //= 2
        while i:
            tree[i] = max(tree[2 * i], tree[2 * i + 1])
            i //= 2

    def seek(slot: int, lo: int) -> None:
        p = ptr[slot]
        while p < len(ends[slot]) and ends[slot][p] < lo:
            p += 1
        ptr[slot] = p
        if p < len(ends[slot]):
            put(slot, starts[slot][p])
            heapq.heappush(events, (ends[slot][p], slot))
        else:
            put(slot, never)

    current = None
    for t in order:
        lo, hi = live[t]
        if size(t) != current:  # a new run: first uses start over
            current = size(t)
            events.clear()
            for slot in range(len(members)):
                ptr[slot] = 0
                seek(slot, lo)
        while events and events[0][0] < lo:
            _, slot = heapq.heappop(events)
            seek(slot, lo)
        if tree[1] > hi:  # some slot is free: descend to the first
            i = 1
            while i < width:
                i = 2 * i if tree[2 * i] > hi else 2 * i + 1
            slot = i - width
            p = ptr[slot]  # the new lifetime goes before the one pointed to (it starts after hi)
            members[slot].append(t)  # largest-first: the first free slot is big enough
            starts[slot].insert(p, lo)
            ends[slot].insert(p, hi)
        else:
            slot = len(members)
            members.append([t])
            starts.append([lo])
            ends.append([hi])
            ptr.append(0)
        put(slot, lo)
        heapq.heappush(events, (hi, slot))
    return members


def _place_updates(f: Fusion, readers: dict[int, list[int]]):
    """Split updates into in-place writes and end-of-step copies."""
    g = f.graph
    inplace: list[tuple[str, int]] = []
    copies: list[tuple[str, int]] = []
    taken: set[int] = set()
    sources = {f.base(u) for _, u in f.updates}
    roots = {f.base(r) for r in f.roots}
    for target, u in f.updates:
        leaf = g.names[target]
        if u == leaf:
            continue  # the value does not change
        if _can_write_in_place(f, leaf, u, readers) and u not in taken and leaf not in sources and leaf not in roots:
            inplace.append((target, u))
            taken.add(u)
        else:
            copies.append((target, u))
    return inplace, copies


def _can_write_in_place(f: Fusion, leaf: int, u: int, readers: dict[int, list[int]]) -> bool:
    g = f.graph
    if f.storage.get(u) != "kernel" or g.nodes[u].shape != g.nodes[leaf].shape:
        return False
    k = f.kernels[f.producer[u]]
    if any(r > k.index for r in readers.get(leaf, [])):
        return False  # a later kernel reads the old value
    if any(f.base(i) == leaf and i != leaf for i in k.inputs):
        return False  # read through a view
    if leaf not in k.inputs:
        return True
    # Each invocation may read the old value only at the element it writes (never as an
    # operand of the anchor, which reads across elements).
    inside = [c for c in k.nodes if leaf in g.nodes[c].inputs]
    return all(reads_own_element(g, f.ident, c, g.nodes[leaf].shape) for c in inside)


def format_plan(p: Plan) -> str:
    """Each kernel with its slots, then the slots and peak bytes (`--emit plan`)."""
    f, g = p.fusion, p.fusion.graph
    label = g.label
    dims = ", ".join(f"{d}={v}" for d, v in sorted(p.ref_dims.items()))
    lines = [f"plan ({'at ' + dims if dims else 'no symbolic dims'})"]
    for k in f.kernels:
        reads = " ".join(f"{label(i)}@s{p.slot_of[i]}" for i in k.inputs)
        writes = " ".join(f"{label(o)}@s{p.slot_of[o]}" for o in k.outputs)
        lines.append(f"  {k.name:<36} reads {reads or '-'}  writes {writes}")
    for target, u in p.copies:
        lines.append(f"  copy {label(u)}@s{p.slot_of[u]} -> {target}@s{_leaf_slot(p, target)}")
    lines.append("slots")
    for s in p.slots:
        if s.kind == "temp":
            holds = [label(t) for t in sorted(p.live) if p.slot_of[t] == s.index]
            what = "temp  " + " | ".join(holds)
        elif s.kind == "const":
            what = f"const {format_shape(g.nodes[s.node].shape)}"
        else:
            what = f"{s.kind:<5} {s.name}"
        lines.append(f"  s{s.index:<3} {what}  ({format_floats(s.sizes)}, {_kb(p.slot_bytes(s))})")
    peak = p.peak_bytes()
    lines.append(f"peak temporaries: {_kb(peak['planned'])} planned, {_kb(peak['no_reuse'])} with no reuse")
    lines.append("leaves: " + ", ".join(f"{k} {_kb(peak[k])}" for k in ("input", "param", "state", "const") if peak[k]))
    return "\n".join(lines)


def _leaf_slot(p: Plan, name: str) -> int:
    for s in p.slots:
        if s.name == name and s.kind != "temp":
            return s.index
    raise KeyError(name)


def _kb(n: int) -> str:
    return f"{n} B" if n < 10240 else f"{n / 1024:.1f} KiB" if n < 10 * 2**20 else f"{n / 2**20:.1f} MiB"
