"""Names and file encodings at the front end: a name longer than an artifact can hold is a
compile error at its line and column (one limit, runtime/sizes.MAX_NAME), a name at the
limit compiles into an artifact that loads (its optimizer state 'W$m' included), and a model
file that is not UTF-8 is an error at the bad byte's line and column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.compiler.emit import write_artifact
from dlc.runtime.artifact.files import read_manifest
from dlc.runtime.sizes import MAX_NAME

ROOT = Path(__file__).resolve().parents[2]

LINEAR = """input x: [B, 3]
input label: [B]
param w: [1, 3] = normal(0, 1)
y = reshape(x @ transpose(w), [B])
loss cost = mean_squared(y, label)
"""


def _named(n: int) -> dict[str, str]:
    return {k: k[0] * n for k in ("x", "label", "w", "y", "cost", "B")}


def _model(names: dict[str, str]) -> str:
    import re

    return re.sub(r"\b(x|label|w|y|cost|B)\b", lambda m: names[m.group(1)], LINEAR)


@pytest.mark.parametrize("length", [MAX_NAME + 1, 300, 5001])
@pytest.mark.parametrize("which, line, column", [("B", 1, 11), ("label", 2, 7), ("w", 3, 7), ("y", 4, 1)])
def test_a_name_over_the_limit_is_an_error_at_its_line_and_column(length, which, line, column):
    names = {k: k for k in _named(1)}
    names[which] = which[0] * length
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(_model(names))
    e = info.value
    assert (e.line, e.column) == (line, column), str(e)
    assert f"is {length} characters long; at most {MAX_NAME} are allowed" in e.message


def test_names_at_the_limit_compile_into_an_artifact_that_loads(tmp_path):
    names = _named(MAX_NAME)
    model = dlc.compile(_model(names))
    out = tmp_path / "long.dlc"
    write_artifact(model, out, train_loss=names["cost"], optimizer=dlc.Adam(0.01), batch_size=4)
    manifest = read_manifest(out)  # the state 'w...w$m' holds a name of MAX_NAME characters
    assert f"{names['w']}$m" in manifest["train"]["states"]
    rng = np.random.default_rng(0)
    feeds = {names["x"]: rng.normal(size=(4, 3)).astype(np.float32), names["label"]: np.zeros(4, np.float32)}
    want = dlc.Session(model, backend="numpy").eval(names["y"], feeds)
    got = dlc.load(out, backend="numpy").eval(names["y"], feeds)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("command", ["check", "compile"])
def test_the_cli_refuses_a_long_name_before_writing_anything(tmp_path, command):
    src = tmp_path / "long.dl"
    src.write_text("input x: [2]\n" + "a" * 5001 + " = relu(x)\n")
    r = subprocess.run(
        [sys.executable, "-m", "dlc", command, str(src)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{src}:2:1: error: the name 'aaaa" in r.stderr and "is 5001 characters long" in r.stderr
    assert not (tmp_path / "long.dlc").exists()


@pytest.mark.parametrize(
    "raw, line, column, byte",
    [
        (b"input x: [2]\n# caf\xe9\ny = relu(x)\n", 2, 6, "0xE9"),
        (b"input x: [2]\ny = relu(x) # \xc3\xa9t\xc3\xa9 \xff\n", 2, 19, "0xFF"),  # columns count characters
        (b"\xfe", 1, 1, "0xFE"),
    ],
)
def test_a_model_file_that_is_not_utf8_is_an_error_at_the_byte(tmp_path, raw, line, column, byte):
    path = tmp_path / "latin1.dl"
    path.write_bytes(raw)
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(str(path))
    e = info.value
    assert (e.loc.file, e.line, e.column) == (str(path), line, column), str(e)
    assert f"the file is not UTF-8 text: {byte} cannot be decoded" in e.message
    r = subprocess.run(
        [sys.executable, "-m", "dlc", "check", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and f"{path}:{line}:{column}: error: the file is not UTF-8 text" in r.stderr, r.stderr
