"""The typed program spec (runtime/spec.py): what the compiler builds is what manifest.json
holds and what the runtime reads back, field for field; codegen options are typed too."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

import dlc
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.codegen import CodegenOptions, codegen_options
from dlc.compiler.emit import programs, write_artifact
from dlc.compiler.pipeline import compile_program
from dlc.runtime.artifact.files import read_artifact, read_manifest
from dlc.runtime.artifact.manifest import validate
from dlc.runtime.spec import FORMAT, Grid, Kernel, ProgramSpec, Slot

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "samples"


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_the_manifest_holds_each_spec_and_reads_back_equal(tmp_path, target):
    model = dlc.compile(str(SAMPLES / "mlp_digits.dl"))
    progs = programs(model, train_loss="cost", optimizer="adam", target=target)
    out = write_artifact(model, tmp_path / "m.dlc", train_loss="cost", optimizer="adam", progs=progs, target=target)
    raw = json.loads((out / "manifest.json").read_text())
    validate(raw, "m")
    typed = read_manifest(out)["programs"]
    assert set(typed) == {"eval", "train"}
    for name, prog in progs.items():
        assert isinstance(typed[name], ProgramSpec)
        assert typed[name] == prog.spec  # compiler's object == the runtime's, through the file
        assert raw["programs"][name] == prog.spec.to_json()
        assert typed[name].target == target and typed[name].format == FORMAT
    assert read_artifact(out).manifest["programs"]["train"] == progs["train"].spec


def test_every_field_kind_round_trips():
    # a split reduction (split + scratch), a const slot, a tiled matmul, debug NaN flags
    b = GraphBuilder()
    x = b.input("x", ("B", 30))
    w = b.const([float(i % 7) for i in range(30 * 4)], (30, 4))
    s = b.add("sum", [b.input("z", (2, "N"))], axes=(1,), keepdims=False)  # reduced length unknown: split
    y = b.add("sqrt", [b.add("matmul", [x, w])])
    spec = compile_program(b.build(), [s, y], ref_dims={"B": 2, "N": 9}, options={"nan_flags": True}).spec
    grids = [k.grid for k in spec.kernels]
    assert any(g.split is not None and g.scratch for g in grids)
    assert any(g.tiles is not None for g in grids)
    assert any(s.kind == "const" and s.values for s in spec.slots)
    assert any(k.nan_flags for k in spec.kernels)
    again = ProgramSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec
    assert again.to_json() == spec.to_json()


def test_specs_are_frozen():
    b = GraphBuilder()
    y = b.add("exp", [b.input("x", (4,))])
    spec = compile_program(b.build(), [y]).spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.kernels[0].slots = ()
    with pytest.raises(TypeError):
        spec.tensors[y] = None
    with pytest.raises(TypeError):
        spec.kernels[0].uniforms["dim0"] = "B"


def test_grid_json_layouts():
    flat = {"flat": [3, "B"], "per_group": 256, "split": [[7, "N"], 64], "scratch": 2}
    tiles = {"tiles": [[[64], 16], [[1, "B"], 16], [[1], 1]], "scratch": 1}
    assert Grid.from_json(flat).to_json() == flat
    assert Grid.from_json(tiles).to_json() == tiles
    assert Grid.from_json(flat).split == ((7, "N"), 64)
    assert Slot.from_json({"kind": "temp", "sizes": [[4, "B"]]}).to_json() == {"kind": "temp", "sizes": [[4, "B"]]}


def test_kernel_json_keeps_only_what_it_has():
    k = Kernel.from_json(
        {
            "name": "k00",
            "slots": [0],
            "uniforms": {},
            "passes": [{"file": "a.frag", "tensor": None}],
            "scratch": {"size": [8], "unit": 1},
            "reads": [],
            "writes": [1],
            "after": [],
            "inputs": [],
            "ir": ["t1 = exp t0"],
            "locs": [None],
        }
    )
    out = k.to_json()
    assert "file" not in out and "grid" not in out and "nan_flags" not in out
    assert out["passes"] == [{"file": "a.frag", "tensor": None}] and out["scratch"] == {"size": [8], "unit": 1}


def test_codegen_options_are_a_frozen_dataclass():
    assert codegen_options(None) == CodegenOptions()
    assert codegen_options({"nan_flags": True, "es": True}) == CodegenOptions(nan_flags=True, es=True)
    o = CodegenOptions(matmul="medium")
    assert codegen_options(o) is o and o.with_(prefetch=False).prefetch is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.es = True
    with pytest.raises(ValueError, match=r"unknown codegen option 'nan_flag': choose from nan_flags, es"):
        codegen_options({"nan_flag": True})
    with pytest.raises(TypeError, match="codegen options must be"):
        codegen_options(["es"])


def test_typed_and_mapping_options_compile_the_same():
    b = GraphBuilder()
    x = b.input("x", ("N",))
    y = b.add("sqrt", [x])
    g = b.build()
    typed = compile_program(g, [y], options=CodegenOptions(nan_flags=True))
    mapping = compile_program(g, [y], options={"nan_flags": True})
    assert typed.sources == mapping.sources and typed.spec == mapping.spec
    assert any(k.nan_flags for k in typed.spec.kernels)
