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
from dlc.runtime.spec import (
    FORMAT,
    Grid,
    Kernel,
    Packed,
    Pass,
    PassScratch,
    ProgramSpec,
    Slot,
    TensorInfo,
    Update,
    check_json,
)

SAMPLES = pathlib.Path(__file__).resolve().parents[2] / "samples"


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_the_manifest_holds_each_spec_and_reads_back_equal(tmp_path, target):
    model = dlc.compile(str(SAMPLES / "mlp_digits.dl"))
    progs = programs(model, train_loss="cost", optimizer="adam", target=target)
    out = write_artifact(model, tmp_path / "m.dlc", train_loss="cost", optimizer="adam", progs=progs, target=target)
    raw = json.loads((out / "manifest.json").read_text())
    validate(raw, "m")
    typed = read_manifest(out)["programs"]
    assert set(typed) == {"eval", "outputs", "train"}
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


# -- the JSON type checks derived from the annotations (spec.check_json) -------------------------
SPEC_CLASSES = [ProgramSpec, Kernel, Slot, TensorInfo, Update, Grid, Pass, Packed, PassScratch]


def _fail(field, problem):
    raise ValueError(f"{field}: {problem}")


def _refusal(v, cls, required=()) -> str:
    with pytest.raises(ValueError) as info:
        check_json(v, cls, "x", _fail, required)
    return str(info.value)


@pytest.mark.parametrize("cls", SPEC_CLASSES, ids=lambda c: c.__name__)
def test_every_field_of_every_spec_type_has_a_checked_json_type(cls):
    # 1.5 is no field's JSON (no field is a bare float); a type without a JSON layout here
    # would raise TypeError instead
    for f in dataclasses.fields(cls):
        what = f.metadata.get("is")  # the field words its type error as what it is
        problem = f"1.5 is not {what}" if what else "must be "
        assert _refusal({f.name: 1.5}, cls).startswith(f"x.{f.name}: {problem}"), f.name


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_the_writers_json_passes_its_own_type_checks(target):
    model = dlc.compile(str(SAMPLES / "mlp_digits.dl"))
    objects = []  # (spec type, its JSON) of every object of the eval and train programs
    for prog in programs(model, train_loss="cost", optimizer="adam", target=target).values():
        p = prog.spec.to_json()
        objects += [(ProgramSpec, p), *[(Slot, s) for s in p["slots"]]]
        objects += [(TensorInfo, t) for t in p["tensors"].values()]
        objects += [(Update, c) for c in p["inplace"] + p["copies"]]
        for k in p["kernels"]:
            objects += [(Kernel, k), *[(Pass, q) for q in k.get("passes", ())]]
            objects += [(Packed, q) for q in k.get("packed", ())]
            objects += [(Grid, k["grid"])] if "grid" in k else []
            objects += [(PassScratch, k["scratch"])] if "scratch" in k else []
    assert {cls for cls, _ in objects} >= {ProgramSpec, Slot, TensorInfo, Update, Kernel}
    assert Grid in {cls for cls, _ in objects} if target == "compute" else Pass in {cls for cls, _ in objects}
    for cls, v in objects:
        check_json(v, cls, "o", _fail)


@pytest.mark.parametrize(
    "v, cls, match",
    [
        ([], Update, r"^x: must be an object, not a list$"),
        ({"target": "W"}, Update, r"^x: the key 'tensor' is missing$"),
        ({"target": "W", "tensor": True}, Update, r"^x\.tensor: must be an integer, not a boolean$"),
        ({"target": 3, "tensor": 0}, Update, r"^x\.target: must be a string, not an integer$"),
        ({"kind": "const", "sizes": [[1]], "values": [1, 1e999]}, Slot, r"^x\.values\[1\]: must be a finite number"),
        ({"kind": "temp", "sizes": {}}, Slot, r"^x\.sizes: must be a list, not an object$"),
        ({"kind": "temp", "sizes": [[1]], "name": None}, Slot, None),  # optional: null is its absence
        ({"tiles": [[[4], 2, 1]]}, Grid, r"^x\.tiles\[0\]: has 3 entries, not 2$"),
        ({"split": [[4], "8"]}, Grid, r"^x\.split\[1\]: must be an integer, not a string$"),
        ({"locs": [None, ["a.dl", 1]]}, Kernel, r"^x\.locs\[1\]: has 2 entries, not 3$"),
        ({"locs": [["a.dl", 1, "2"]]}, Kernel, r"^x\.locs\[0\]\[2\]: must be an integer"),
        ({"uniforms": {"dim0": 3}}, Kernel, r"^x\.uniforms\.dim0: must be a string, not an integer$"),
        ({"grid": [1]}, Kernel, r"^x\.grid: must be an object, not a list$"),
        ({"passes": [3]}, Kernel, r"^x\.passes\[0\]: must be an object, not an integer$"),
        ({"producer": {"0": "1"}}, ProgramSpec, r"^x\.producer\.0: must be an integer, not a string$"),
        ({"peak_bytes": {"planned": 4.5}}, ProgramSpec, r"^x\.peak_bytes\.planned: must be an integer"),
    ],
)
def test_json_types_come_from_the_annotations(v, cls, match):
    if match is None:
        check_json(v, cls, "x", _fail, ())
    else:
        with pytest.raises(ValueError, match=match):
            check_json(v, cls, "x", _fail, None if isinstance(v, list) or set(v) == {"target"} else ())


def test_nested_spec_objects_are_checked_too():
    with pytest.raises(ValueError, match=r"^x\.grid\.per_group: must be an integer, not a string$"):
        check_json({"grid": {"per_group": "x"}}, Kernel, "x", _fail, ())
    with pytest.raises(ValueError, match=r"^x\.passes\[1\]: the key 'tensor' is missing$"):
        check_json({"passes": [{"file": "a.frag", "tensor": 0}, {"file": "b.frag"}]}, Kernel, "x", _fail, ())
    with pytest.raises(ValueError, match=r"^x\.tensors\.3\.shape: must be a list, not a string$"):
        check_json({"tensors": {"3": {"slot": 0, "shape": "B", "label": ""}}}, ProgramSpec, "x", _fail, ())
    with pytest.raises(ValueError, match=r"^x\.passes\[0\]\.into: '3' is not a packed unit of the kernel"):
        check_json({"passes": [{"file": "a.frag", "tensor": None, "into": "3"}]}, Kernel, "x", _fail, ())


def test_null_is_an_optional_fields_absence_when_read_too():
    k = {"name": "k", "slots": [], "uniforms": {}, "reads": [], "writes": [], "after": [], "inputs": []}
    k |= {"ir": [], "locs": [], "grid": None, "local_size": None, "scratch": None, "file": None}
    check_json(k, Kernel, "x", _fail)
    read = Kernel.from_json(k)
    assert read.grid is None and read.local_size is None and read.scratch is None and read.file is None
    assert Grid.from_json({"tiles": None, "flat": [4], "per_group": 2, "split": None}) == Grid(flat=(4,), per_group=2)
