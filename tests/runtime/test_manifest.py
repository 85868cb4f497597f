"""A compiled artifact is untrusted input: every tampering is refused, naming the manifest and
the field, before any GL call (nothing here needs a GL context)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import dlc
from dlc.compiler.emit import write_artifact
from dlc.runtime.artifact.files import read_artifact
from dlc.runtime.artifact.manifest import FORMAT, ArtifactError, parse, validate
from dlc.runtime.errors import DlcError

MLP = pathlib.Path("samples/mlp_digits.dl").resolve()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """mlp_digits compiled with a training step (eval and train programs)."""
    out = tmp_path_factory.mktemp("pristine") / "mlp.dlc"
    write_artifact(dlc.compile(str(MLP)), out, train_loss="cost", optimizer=dlc.Adam(0.01))
    return out


@pytest.fixture
def art(pristine, tmp_path):
    """A private copy to tamper with."""
    out = tmp_path / "mlp.dlc"
    shutil.copytree(pristine, out)
    return out


def edit(folder: pathlib.Path, change) -> None:
    """Apply `change(manifest dict)` to folder/manifest.json."""
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


def refused(folder, match: str) -> str:
    with pytest.raises(ArtifactError, match=match) as info:
        read_artifact(folder)
    text = str(info.value)
    assert text.startswith(f"{folder}{os.sep}manifest.json: "), text
    return text


def test_the_writer_writes_a_format_the_reader_accepts(pristine):
    files = read_artifact(pristine)
    assert files.manifest["format"] == FORMAT
    assert files.manifest["programs"]["train"].format == FORMAT
    assert set(files.sources) == {"eval", "outputs", "train"}
    assert set(files.params) == {"W1", "b1", "W2", "b2"}
    assert files.params["W1"].shape == (64, 64) and files.params["W1"].dtype == np.float32
    assert "W1$m" in files.state and "$t" in files.state
    with np.load(pristine / "params.npz") as z:
        for name in z.files:
            np.testing.assert_array_equal(files.params[name], z[name])


def test_path_traversal_reads_nothing_outside(art):
    def traverse(m):
        m["programs"]["eval"]["kernels"][3]["file"] = "../../etc/passwd"

    edit(art, traverse)
    text = refused(
        art,
        r"programs\.eval\.kernels\[3\]\.file: '\.\./\.\./etc/passwd' leaves "
        "the artifact folder",
    )
    assert "root:" not in text


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "sub/x.glsl", "..", "..glsl", "a\\b.glsl", ".hidden.glsl", "", 7, None]
)
def test_file_names_stay_plain(art, name):
    def change(m):
        m["programs"]["train"]["kernels"][0]["file"] = name

    edit(art, change)
    refused(art, r"programs\.train\.kernels\[0\]\.file: ")


def test_a_symlink_out_of_the_folder_is_refused(art, tmp_path):
    secret = tmp_path / "secret.glsl"
    secret.write_text("#version 430\nTOP SECRET\n")
    m = json.loads((art / "manifest.json").read_text())
    victim = art / m["programs"]["eval"]["kernels"][1]["file"]
    (art / "inside.glsl").write_bytes(victim.read_bytes())
    victim.unlink()
    victim.symlink_to(secret)
    text = refused(
        art,
        r"programs\.eval\.kernels\[1\]\.file: '.*' is a link that leaves the "
        "artifact folder",
    )
    assert "SECRET" not in text
    # a link to a file inside the folder is as good as the file
    victim.unlink()
    victim.symlink_to("inside.glsl")
    read_artifact(art)


def test_a_symlinked_manifest_out_of_the_folder_is_refused(art, tmp_path):
    outside = tmp_path / "elsewhere.json"
    shutil.move(art / "manifest.json", outside)
    (art / "manifest.json").symlink_to(outside)
    refused(art, r"file: 'manifest\.json' is a link that leaves the artifact folder")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_without_blocking(art):
    m = json.loads((art / "manifest.json").read_text())
    victim = art / m["programs"]["eval"]["kernels"][0]["file"]
    victim.unlink()
    os.mkfifo(victim)
    refused(art, r"programs\.eval\.kernels\[0\]\.file: '.*' is not a regular file")


def test_a_missing_or_huge_shader_is_refused(art):
    m = json.loads((art / "manifest.json").read_text())
    (art / m["programs"]["eval"]["kernels"][2]["file"]).unlink()
    refused(art, r"programs\.eval\.kernels\[2\]\.file: '.*' is missing")
    (art / m["programs"]["eval"]["kernels"][2]["file"]).write_text("// x\n" * 300_000)
    refused(art, r"programs\.eval\.kernels\[2\]\.file: '.*' is 1500000 bytes; at most")
    (art / m["programs"]["eval"]["kernels"][2]["file"]).write_bytes(b"#version 430\n\xff\n")
    refused(art, r"programs\.eval\.kernels\[2\]\.file: '.*' is not ASCII text")


@pytest.mark.parametrize("uniform", ["dim0; x", "dim0[2]", "", "0dim"])
def test_uniform_names_must_be_identifiers(art, uniform):
    def rename(m):
        k = m["programs"]["eval"]["kernels"][1]
        k["uniforms"] = {uniform: k["uniforms"].pop("dim0")}

    edit(art, rename)
    refused(art, r"programs\.eval\.kernels\[1\]\.uniforms: the name .* is not a GLSL identifier")


def test_uniforms_must_match_the_shader(art):
    def rename(m):
        k = m["programs"]["eval"]["kernels"][1]
        k["uniforms"] = {"dim7": k["uniforms"].pop("dim0")}

    edit(art, rename)
    refused(art, r"programs\.eval\.kernels\[1\]\.uniforms\.dim7: '.*' declares no uniform int dim7")

    def drop(m):
        m["programs"]["eval"]["kernels"][1]["uniforms"] = {}

    edit(art, drop)
    refused(
        art,
        r"kernels\[1\]\.uniforms: '.*' declares uniform int dim0, which the manifest "
        "gives no value",
    )


def test_a_precision_qualified_uniform_is_checked_too(art):
    m = json.loads((art / "manifest.json").read_text())
    shader = art / m["programs"]["eval"]["kernels"][1]["file"]
    text = shader.read_text()
    shader.write_text(text.replace("uniform int dim0;", "uniform int dim0;\nuniform highp int sneaky;", 1))
    refused(art, r"kernels\[1\]\.uniforms: '.*' declares uniform int sneaky, which the manifest gives no value")


def test_bindings_must_be_within_the_kernels_slots(art):
    def drop_slot(m):
        m["programs"]["eval"]["kernels"][1]["slots"].pop()

    edit(art, drop_slot)
    refused(art, r"kernels\[1\]\.(slots: '.*' uses buffer binding \d+|writes\[\d\]: tensor)")


@pytest.mark.parametrize(
    "raw, match",
    [
        (b"{", r"not valid JSON: Expecting property name enclosed in double quotes at line 1"),
        (b"[1, 2]", r"the manifest: must be an object, not a list"),
        (b'"format"', r"the manifest: must be an object, not a string"),
        (b"\xff\xfe{}", r"not UTF-8 text"),
        (b'{"format": NaN}', r"not valid JSON: NaN is not JSON"),
        (b'{"format": 1, "format": 1}', r"key 'format' appears twice"),
        (b"[" * 100_000 + b"]" * 100_000, r"not valid JSON"),
        (b"", r"not valid JSON"),
    ],
)
def test_malformed_json_is_refused(art, raw, match):
    (art / "manifest.json").write_bytes(raw)
    refused(art, match)


@pytest.mark.parametrize(
    "version, match",
    [
        (2, r"format: artifact format 2 is not one this dlc reads \(1\); recompile"),
        ("1", r"format: artifact format '1' is not one this dlc reads"),
        (True, r"format: artifact format True is not"),
    ],
)
def test_unknown_format_versions_are_refused(art, version, match):
    edit(art, lambda m: m.__setitem__("format", version))
    refused(art, match)
    edit(art, lambda m: m.pop("format"))
    refused(art, r"format: missing: this is no dlc artifact, or one from an older dlc")


def _set(path, value):
    """A change setting the item at `path` (keys and indices) to `value`."""

    def change(m):
        for key in path[:-1]:
            m = m[key]
        m[path[-1]] = value

    return change


def _delete(path):
    def change(m):
        for key in path[:-1]:
            m = m[key]
        del m[path[-1]]

    return change


@pytest.mark.parametrize(
    "change, match",
    [
        (_delete(["programs"]), r"the manifest: the key 'programs' is missing"),
        (
            _delete(["programs", "eval", "kernels", 0, "grid"]),
            r"programs\.eval\.kernels\[0\]: the key 'grid' is missing",
        ),
        (
            _set(["programs", "eval", "kernels", 1, "slots", 0], 999),
            r"programs\.eval\.kernels\[1\]\.slots\[0\]: 999 is out of range \(0 to \d+\)",
        ),
        (
            _set(["programs", "eval", "tensors", "0", "slot"], -1),
            r"programs\.eval\.tensors\.0\.slot: -1 is out of range",
        ),
        (
            _set(["programs", "eval", "slots", 4, "sizes", 0, 0], -4),
            r"programs\.eval\.slots\[4\]\.sizes\[0\]\[0\]: -4 is out of range",
        ),
        (
            _set(["programs", "eval", "slots", 4, "sizes", 0, 0], 2**40),
            r"programs\.eval\.slots\[4\]\.sizes\[0\]\[0\]: 1099511627776 is out of range",
        ),
        (_set(["params", "W1"], [2**20, 2**20]), r"params\.W1: 1099511627776 elements; at most"),
        (_set(["params", "W1"], [64, -4]), r"params\.W1\[1\]: -4 is out of range"),
        (_set(["params", "W1"], [64, "B"]), r"params\.W1\[1\]: must be a number: 'B' is symbolic"),
        (
            _set(["programs", "eval", "slots", 2, "sizes"], [[10]]),
            r"programs\.eval\.slots\[2\]\.sizes\[0\]: \[10\] is not the 4096 elements of param 'W1'",
        ),
        (
            _set(["programs", "eval", "tensors", "2", "shape"], [64, 65]),
            r"programs\.eval\.tensors\.2: 4160 elements do not fit in param 'W1' \(4096\)",
        ),
        (
            _set(["programs", "eval", "kernels", 2, "after"], [5]),
            r"programs\.eval\.kernels\[2\]\.after\[0\]: 5 is out of range \(0 to 1\)",
        ),
        (
            _set(["programs", "eval", "kernels", 1, "inputs"], ["nope"]),
            r"programs\.eval\.kernels\[1\]\.inputs\[0\]: 'nope' is not an input of the artifact",
        ),
        (
            _set(["programs", "eval", "kernels", 1, "uniforms", "dim0"], "Q"),
            r"programs\.eval\.kernels\[1\]\.uniforms\.dim0: 'Q' is not one of the program's dims",
        ),
        (
            _set(["programs", "eval", "kernels", 1, "grid"], {"flat": [4, "Q"], "per_group": 0}),
            r"programs\.eval\.kernels\[1\]\.grid\.flat\[1\]: 'Q' is not one of the program's dims",
        ),
        (
            _set(["programs", "eval", "kernels", 1, "grid"], {"flat": [4], "per_group": 0}),
            r"programs\.eval\.kernels\[1\]\.grid\.per_group: 0 is out of range",
        ),
        (
            _set(["programs", "eval", "slots", 0, "name"], "W1"),
            r"programs\.eval\.slots\[0\]\.name: 'W1' is not one of the artifact's inputs",
        ),
        (
            _set(["programs", "eval", "slots", 0, "sizes"], [[1, "B"]]),
            r"programs\.eval\.slots\[0\]: 64\*B elements do not fit in input 'pixels's slot",
        ),
        (_set(["names", "cost"], 99999), r"names\.cost: tensor 99999 is not a tensor of the eval"),
        (_set(["losses"], ["nothing"]), r"losses\[0\]: 'nothing' is not a name in 'names'"),
        (_set(["train", "loss"], "probs"), r"train\.loss: 'probs' is not one of 'losses'"),
        (_set(["train", "optimizer", "lr"], "fast"), r"train\.optimizer\.lr: must be a finite number"),
        (_set(["train"], None), r"programs: has a 'train' program exactly when 'train' is set"),
        (
            _set(["programs", "train", "copies"], [{"target": "W9", "tensor": 0}]),
            r"programs\.train\.copies\[0\]\.target: 'W9' is not a param or optimizer state",
        ),
        (
            _set(["programs", "eval", "slots", 0, "kind"], "magic"),
            r"programs\.eval\.slots\[0\]\.kind: 'magic' is not a slot kind",
        ),
        (_set(["programs", "nope"], {}), r"programs: 'nope' is not a program this dlc runs"),
        (_set(["inputs", "pixels"], ["B", "x y"]), r"inputs\.pixels\[1\]: 'x y' is not a dim name"),
        (
            _set(["tensors", "h"], ["B", 10]),
            r"names\.h: tensor 10 has shape \['B', 64\], but 'h' is declared \['B', 10\]",
        ),
        (
            _set(["programs", "train", "roots"], [0]),
            r"programs\.train\.roots\[0\]: the loss tensor 0 has shape \['B', 64\], not a scalar",
        ),
    ],
)
def test_each_broken_field_is_named(art, change, match):
    edit(art, change)
    refused(art, match)


def _outputs_shape(m):
    t = m["names"]["probs"]
    m["programs"]["outputs"]["tensors"][str(t)]["shape"] = ["B", 5]


@pytest.mark.parametrize(
    "change, match",
    [
        (_delete(["outputs"]), r"outputs: is there exactly when programs\.outputs is"),
        (_delete(["programs", "outputs"]), r"outputs: is there exactly when programs\.outputs is"),
        (_set(["outputs"], "probs"), r"outputs: must be a list, not a string"),
        (_set(["outputs"], []), r"outputs: is empty"),
        (_set(["outputs"], ["nope"]), r"outputs\[0\]: 'nope' is not a name in 'names'"),
        (_set(["outputs"], ["probs", "probs"]), r"outputs\[1\]: 'probs' appears twice"),
        (_set(["outputs"], ["h"]), r"outputs\[0\]: tensor \d+ \('h'\) is not a root of programs\.outputs"),
        (_outputs_shape, r"outputs\[0\]: tensor \d+ has shape \['B', 5\] there but \['B', 10\] in the eval program"),
    ],
)
def test_the_outputs_program_and_its_names_are_checked(art, change, match):
    m = json.loads((art / "manifest.json").read_text())
    assert m["outputs"] == ["probs", "prediction", "accuracy"]  # the model's outputs (predict's)
    assert set(m["programs"]["outputs"]["roots"]) == {m["names"][n] for n in m["outputs"]}
    edit(art, change)
    refused(art, match)


def test_validation_checks_the_parsed_object_without_files():
    with pytest.raises(ArtifactError, match=r"^m\.json: the manifest: must be an object"):
        validate([], "m.json")
    with pytest.raises(ArtifactError, match=r"^m\.json: not valid JSON"):
        parse(b"{,}", "m.json")


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_params_npz_is_read_safely(art, pristine):
    params = art / "params.npz"
    good = params.read_bytes()
    params.write_bytes(good[: len(good) // 2])
    refused(art, r"params: 'params\.npz' is not a readable \.npz file")
    params.write_bytes(os.urandom(4000))
    refused(art, r"params: 'params\.npz' is not a readable \.npz file")
    with np.load(pristine / "params.npz") as z:
        arrays = {k: z[k] for k in z.files}
    params.write_bytes(_npz_bytes({**arrays, "extra": np.zeros(3)}))
    refused(art, r"params: 'params\.npz' holds 'extra\.npy', which is not one of")
    params.write_bytes(_npz_bytes({k: v for k, v in arrays.items() if k != "b2"}))
    refused(art, r"params: 'params\.npz' has no array 'b2'")
    params.write_bytes(_npz_bytes({**arrays, "b2": np.zeros(11)}))
    refused(art, r"params: 'params\.npz': array 'b2' has shape \[11\] but the manifest says \[10\]")
    params.write_bytes(_npz_bytes({**arrays, "b2": np.array([None] * 10, dtype=object)}))
    refused(art, r"array 'b2' holds object, not numbers")
    params.write_bytes(_npz_bytes({**arrays, "b2": np.full(10, np.nan)}))
    refused(art, r"array 'b2' holds NaN or infinite values")
    (art / "state.npz").unlink()
    params.write_bytes(good)
    refused(art, r"train\.states: 'state\.npz' is missing")


def test_an_absurd_npy_header_is_refused_before_reading(art, pristine):
    with np.load(pristine / "params.npz") as z:
        arrays = {k: z[k] for k in z.files}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for k, v in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, v)
            zf.writestr(f"{k}.npy", header.getvalue() if k == "b2" else member.getvalue())
    (art / "params.npz").write_bytes(buf.getvalue())
    # refused from its header, before any of the 4 TB is allocated (runtime/npzfile.py)
    refused(art, r"params: 'params\.npz' is not a readable \.npz file \(array 'b2' claims shape \[1000000000000\]")


def test_the_cli_prints_a_dlc_error_not_an_internal_one(art, tmp_path):
    edit(art, _set(["programs", "eval", "kernels", 3, "file"], "../../etc/passwd"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlc",
            "eval",
            str(art),
            "--fetch",
            "probs",
            "--data",
            str(pathlib.Path("samples/data/digits_test.npz").resolve()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "internal error" not in done.stderr and "root:" not in done.stderr + done.stdout
    assert "manifest.json: programs.eval.kernels[3].file: '../../etc/passwd' leaves the artifact folder" in done.stderr


def test_artifact_errors_are_dlc_errors():
    assert issubclass(ArtifactError, DlcError)


def test_a_split_k_conv_gradients_scratch_is_read_back_and_checked(tmp_path):
    # cnn_digits' first filter gradient splits its K (B * 64) across work groups: a tiled
    # grid with a scratch buffer (compiler/codegen/kernels_matmul.py, _split_k)
    out = tmp_path / "cnn.dlc"
    write_artifact(dlc.compile(str(MLP.with_name("cnn_digits.dl"))), out, train_loss="cost", optimizer=dlc.SGD(0.1))
    kernels = read_artifact(out).manifest["programs"]["train"].kernels
    split = [i for i, k in enumerate(kernels) if k.grid.tiles is not None and k.grid.scratch]
    assert split, "no split-K kernel in the CNN's train program"
    edit(out, _set(["programs", "train", "kernels", split[0], "grid", "scratch"], 2))
    refused(out, rf"programs\.train\.kernels\[{split[0]}\]\.grid\.scratch: 2 is out of range \(1 to 1\)")


def _rename(old: str, new: str):
    """A change renaming the param `old` to `new` everywhere the manifest names it."""

    def change(m):
        text = json.dumps(m).replace(f'"{old}"', f'"{new}"').replace(f'"{old}$', f'"{new}$')
        m.clear()
        m.update(json.loads(text))

    return change


def test_dotted_param_names_make_a_valid_artifact(tmp_path):
    src = "input x: [B, 2]\nparam h.0.attn.c_attn.weight: [2, 2]\nfrozen param wte.weight: [2]\n"
    src += "loss cost = sum(x @ h.0.attn.c_attn.weight + wte.weight)\n"
    out = tmp_path / "m.dlc"
    write_artifact(dlc.compile(src), out, train_loss="cost", optimizer=dlc.Adam(0.01))
    read_artifact(out)
    with np.load(out / "params.npz") as w:
        assert set(w.files) == {"h.0.attn.c_attn.weight", "wte.weight"}
    s = dlc.Session(str(out), backend="numpy")
    assert set(s.params) == {"h.0.attn.c_attn.weight", "wte.weight"}


@pytest.mark.parametrize("name", ["a..b", "../W1", "a/b", ".a", "a.", "h.0/../x", "a.b c", "a.-b"])
def test_hostile_dotted_names_are_refused(art, name):
    edit(art, _rename("W1", name))
    refused(art, r"is not a tensor name")


def _required_paths(m) -> list[tuple[list, str]]:
    """(path of an object, a key it must have) for one object of each spec type in `m`, the
    keys taken from the typed spec (runtime/spec.py `required_keys`)."""
    from dlc.runtime.spec import Kernel, ProgramSpec, Slot, TensorInfo, Update, required_keys

    prog = ["programs", "train"]
    tensor = next(iter(m["programs"]["train"]["tensors"]))
    update = "copies" if m["programs"]["train"]["copies"] else "inplace"
    objects = [
        (prog, [k for k in required_keys(ProgramSpec) if k != "name"]),
        ([*prog, "kernels", 0], required_keys(Kernel)),
        ([*prog, "slots", 0], required_keys(Slot)),
        ([*prog, "tensors", tensor], required_keys(TensorInfo)),
        ([*prog, update, 0], required_keys(Update)),
    ]
    return [(path, key) for path, keys in objects for key in keys]


def test_every_key_the_typed_spec_requires_is_checked(pristine, tmp_path):
    m = json.loads((pristine / "manifest.json").read_text())
    paths = _required_paths(m)
    assert len(paths) >= 20  # the spec's required fields, not an empty list
    for path, key in paths:
        broken = json.loads(json.dumps(m))
        _delete([*path, key])(broken)
        field = ".".join(str(p) for p in path[:2]) + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[2:]
        )
        with pytest.raises(ArtifactError, match=re.escape(f"{field}: the key '{key}' is missing")):
            validate(broken, "manifest.json")


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("passes", [{"file": 3}], r"kernels\[0\]\.passes\[0\]: the key 'tensor' is missing"),
        ("scratch", {"size": [4], "unit": "0"}, r"kernels\[0\]\.scratch\.unit: must be an integer, not a string"),
        ("nan_flags", [0.5], r"kernels\[0\]\.nan_flags\[0\]: must be an integer, not a number"),
    ],
)
def test_fields_the_target_does_not_use_are_typed_too(art, key, value, match):
    # a compute kernel's texture fields: the runtime's reader (spec.Kernel.from_json) reads them
    edit(art, _set(["programs", "eval", "kernels", 0, key], value))
    refused(art, match)
