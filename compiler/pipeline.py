"""The GL back end as one ordered list of named stages: IR -> kernels -> plan -> GLSL -> program.

`compile_program` runs them for one program (a set of fetches, plus the updates of a training
step) and returns a `CompiledProgram`: the fusion and plan (for `--emit`), the GLSL sources,
and `spec`, a JSON-able description of every launch that `dlc.runtime.executor` runs without
the compiler. The artifact writer puts specs in manifest.json; the GL backend runs them in
memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .codegen import KernelSource, dim_index, render
from .fusion import Fusion, fuse
from .ir import Graph
from .plan import Plan, plan

FORMAT = 1  # the version of the program spec and manifest layout


@dataclass
class CompiledProgram:
    name: str
    fusion: Fusion
    plan: Plan
    kernels: list[KernelSource]
    spec: dict
    sources: dict[str, str]  # file name -> GLSL text


def compile_program(graph: Graph, roots: Sequence[int], *, name: str = "eval",
                    updates: Iterable[tuple[str, int]] = (),
                    ref_dims: Mapping[str, int] | None = None,
                    options: Mapping | None = None, target: str = "compute") -> CompiledProgram:
    """Fuse, plan and render the work of fetching `roots` (and applying `updates`) for
    `target`: "compute" (GLSL 4.30 compute shaders) or "texture" (codegen/texture.py)."""
    fusion = fuse(graph, roots, updates)
    storage = plan(fusion, ref_dims)
    if target == "texture":
        from .codegen import texture

        rendered = texture.render(storage, options)
        spec, sources = texture.program(name, storage, rendered)
        return CompiledProgram(name, fusion, storage, [t.kernel for t in rendered], spec, sources)
    kernels = render(storage, options)
    spec, sources = program_spec(name, storage, kernels)
    return CompiledProgram(name, fusion, storage, kernels, spec, sources)


def program_spec(name: str, p: Plan, kernels: list[KernelSource]) -> tuple[dict, dict[str, str]]:
    f, g = p.fusion, p.fusion.graph
    label = g.label
    made = f.producer
    sources: dict[str, str] = {}
    kernel_specs = []
    for k, ks in zip(f.kernels, kernels):
        file = f"{name}_{ks.name}.glsl"
        sources[file] = ks.source
        bases = [f.base(i) for i in k.inputs]
        kernel_specs.append({
            "name": ks.name,
            "file": file,
            "kind": k.kind,
            "slots": list(ks.slots),
            "uniforms": dict(ks.uniforms),
            **({"scalars": dict(ks.scalars)} if ks.scalars else {}),  # eager numbers only
            "grid": ks.grid,
            "local_size": list(ks.local_size),
            "reads": list(k.inputs),
            "writes": list(k.outputs),
            "after": sorted({made[b] for b in bases if b in made}),
            "inputs": sorted({g.nodes[b].attr("name") for b in bases
                              if g.nodes[b].op == "input"}),
            "ir": list(ks.ir),
            "locs": [list(x) if x else None for x in ks.locs],
            **({"nan_flags": list(ks.nan_flags)} if ks.nan_flags else {}),
        })
    slots = []
    for s in p.slots:
        entry: dict = {"kind": s.kind, "sizes": [list(z) for z in s.sizes]}
        if s.name is not None:
            entry["name"] = s.name
        if s.kind == "const":
            entry["values"] = list(g.nodes[s.node].attr("value"))
        slots.append(entry)
    tensors = {str(t): {"slot": s, "shape": list(g.nodes[t].shape), "label": label(t)}
               for t, s in sorted(p.slot_of.items())}
    fetch = {}
    for r in f.roots:
        fetch.setdefault(label(r), r)
    spec = {
        "format": FORMAT,
        "name": name,
        "dims": list(dim_index(p)),  # in uniform order
        "ref_dims": dict(p.ref_dims),
        "slots": slots,
        "tensors": tensors,
        "roots": list(f.roots),
        "fetch": fetch,
        "producer": {str(t): made[f.base(t)] for t in p.slot_of if f.base(t) in made},
        "kernels": kernel_specs,
        "inplace": [{"target": t, "tensor": u} for t, u in p.inplace],
        "copies": [{"target": t, "tensor": u} for t, u in p.copies],
        "peak_bytes": p.peak_bytes(),
    }
    return spec, sources
