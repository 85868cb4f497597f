"""What every target's program shares: the uniform number of each symbolic dim, and the
program spec (runtime/spec.py) of a planned program from its rendered kernels.

A target adds its own fields to the spec (the texture target its render passes) by
`dataclasses.replace` on what `program_spec` returns.
"""

from __future__ import annotations

from dlc.runtime.dims import shape_symbols
from dlc.runtime.spec import FORMAT, Grid, Kernel, ProgramSpec, Slot, TensorInfo, Update

from ..plan import Plan
from .glsl import KernelSource


def dim_index(plan: Plan) -> dict[str, int]:
    """Symbolic dim -> k of its uniform `dim<k>` (sorted by name, program-wide)."""
    names = shape_symbols(n.shape for n in plan.fusion.graph.nodes)
    for n in plan.fusion.graph.nodes:  # dims named only in attrs (dim_size, reshape targets)
        for _, v in n.attrs:
            if isinstance(v, tuple):
                names |= shape_symbols([[d for d in v if isinstance(d, str) and _is_dim(d)]])
    return {d: k for k, d in enumerate(sorted(names))}


def _is_dim(text: str) -> bool:
    """A string attr that is a dim: a symbol or a product (`B*T`), not a word like "same"."""
    return all(p.isidentifier() or p.isdigit() for p in text.split("*"))


def program_spec(
    name: str, p: Plan, kernels: list[KernelSource], runtime: str = "compute"
) -> tuple[ProgramSpec, dict[str, str]]:
    """The program spec of planned program `p` rendered as `kernels` (for the executor named
    `runtime`: a Target's), and its GLSL files."""
    f, g = p.fusion, p.fusion.graph
    label = g.label
    made = f.producer
    sources: dict[str, str] = {}
    kernel_specs = []
    for k, ks in zip(f.kernels, kernels):
        file = f"{name}_{ks.name}.glsl"
        sources[file] = ks.source
        bases = [f.base(i) for i in k.inputs]
        kernel_specs.append(
            Kernel(
                name=ks.name,
                file=file,
                kind=k.kind,
                slots=tuple(ks.slots),
                uniforms=ks.uniforms,
                scalars=ks.scalars,  # eager numbers only
                grid=Grid.from_json(ks.grid),
                local_size=tuple(ks.local_size),
                reads=tuple(k.inputs),
                writes=tuple(k.outputs),
                after=tuple(sorted({made[b] for b in bases if b in made})),
                inputs=tuple(sorted({g.nodes[b].attr("name") for b in bases if g.nodes[b].op == "input"})),
                ir=tuple(ks.ir),
                locs=tuple(tuple(x) if x else None for x in ks.locs),
                nan_flags=tuple(ks.nan_flags),
            )
        )
    slots = tuple(
        Slot(
            s.kind,
            tuple(tuple(z) for z in s.sizes),
            s.name,
            tuple(g.nodes[s.node].attr("value")) if s.kind == "const" else None,
        )
        for s in p.slots
    )
    tensors = {t: TensorInfo(s, tuple(g.nodes[t].shape), label(t)) for t, s in sorted(p.slot_of.items())}
    fetch: dict[str, int] = {}
    for r in f.roots:
        fetch.setdefault(label(r), r)
    program = ProgramSpec(
        name=name,
        dims=tuple(dim_index(p)),  # in uniform order
        ref_dims=p.ref_dims,
        slots=slots,
        tensors=tensors,
        roots=tuple(f.roots),
        fetch=fetch,
        producer={t: made[f.base(t)] for t in p.slot_of if f.base(t) in made},
        kernels=tuple(kernel_specs),
        inplace=tuple(Update(t, u) for t, u in p.inplace),
        copies=tuple(Update(t, u) for t, u in p.copies),
        peak_bytes=p.peak_bytes(),
        format=FORMAT,
        target=runtime,
    )
    return program, sources
