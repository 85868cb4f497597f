"""`dlc compile`: --emit ir (with and without --train), and the artifact folder it writes
(with --emit: only when -o names one)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import dlc

ROOT = Path(__file__).resolve().parents[2]
HAS_ARTIFACT = importlib.util.find_spec("dlc.compiler.artifact") is not None
needs_artifact = pytest.mark.skipif(not HAS_ARTIFACT, reason="dlc.compiler.artifact not built yet")


def check_artifact_outcome(p, folder: Path) -> None:
    """With the GLSL compiler the artifact is written; without, a clear error after the IR."""
    if HAS_ARTIFACT:
        assert p.returncode == 0, p.stderr
        assert (folder / "manifest.json").is_file()
    else:
        assert p.returncode == 1
        assert "no GLSL compiler" in p.stderr and "Traceback" not in p.stderr


def test_emit_ir_prints_the_graph_and_writes_nothing(dlc_run, models):
    before = sorted(models.iterdir())
    p = dlc_run("compile", "quadratic.dl", "--emit", "ir", cwd=models)
    assert p.returncode == 0, p.stderr
    expected = str(dlc.compile(ROOT / "samples" / "quadratic.dl").graph)
    assert p.stdout == expected + "\n"
    assert "y = add(" in p.stdout and "loss cost" in p.stdout
    assert sorted(models.iterdir()) == before  # a look at a stage: no folder written
    assert "wrote" not in p.stderr


@needs_artifact
def test_emit_leaves_an_existing_artifact_alone(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", "--train", "--optimizer", "adam", cwd=models)
    assert p.returncode == 0, p.stderr
    manifest = (models / "quadratic.dlc" / "manifest.json").read_bytes()
    p = dlc_run("compile", "quadratic.dl", "--emit", "glsl", cwd=models)  # an eval-only build, once
    assert p.returncode == 0, p.stderr
    assert (models / "quadratic.dlc" / "manifest.json").read_bytes() == manifest
    assert "warning" not in p.stderr


def test_emit_ir_with_train_prints_gradients_and_updates(dlc_run, models):
    p = dlc_run(
        "compile", "quadratic.dl", "--train", "--optimizer", "momentum", "--emit", "ir", "-o", "out.dlc", cwd=models
    )
    for name in ("grad$a", "grad$b", "grad$c", "a$", "$lr"):
        assert name in p.stdout, name
    for param in "abc":
        assert f"update {param} <- " in p.stdout
    check_artifact_outcome(p, models / "out.dlc")


def test_train_with_named_loss(dlc_run, tmp_path):
    (tmp_path / "m.dl").write_text(
        "input x: [B]\nparam w: [] = 1\nloss first = mean(x * w)\nloss second = mean((x * w)^2)\n"
    )
    p = dlc_run("compile", "m.dl", "--train", "second", "--emit", "ir", cwd=tmp_path)
    assert "grad$w" in p.stdout
    p = dlc_run("compile", "m.dl", "--train", "secnd", "--emit", "ir", cwd=tmp_path)
    assert p.returncode == 1 and "did you mean 'second'?" in p.stderr


@needs_artifact
@pytest.mark.gl  # opening the folder uploads its params
def test_artifact_default_folder_and_model_folder_commands(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", cwd=models)
    assert p.returncode == 0, p.stderr
    folder = models / "quadratic.dlc"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest
    assert (folder / "params.npz").is_file()
    assert list(folder.glob("*.glsl"))
    p = dlc_run("check", folder)
    assert p.returncode == 0, p.stderr
    assert "param" in p.stdout and "y_label" in p.stdout


@needs_artifact
@pytest.mark.parametrize("stage", ["glsl", "plan"])
def test_emit_stages_with_o_also_write_the_folder(dlc_run, models, stage):
    p = dlc_run("compile", "mlp_digits.dl", "--emit", stage, "--batch-size", "32", "-o", "mlp.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()
    if stage == "glsl":
        assert "#version" in p.stdout
    assert "wrote mlp.dlc" in p.stderr  # the status line stays out of the emitted text
    assert (models / "mlp.dlc" / "manifest.json").is_file()


def test_compile_refuses_a_folder(dlc_run, tmp_path):
    p = dlc_run("compile", tmp_path)
    assert p.returncode == 2 and "takes a .dl model" in p.stderr


def test_emit_writes_nothing_without_an_output_folder(dlc_run, models):
    # what --emit prints is checked against tests/golden; here: it prints, and writes nothing
    p = dlc_run("compile", "mlp_digits.dl", "--train", "--emit", "fuse", cwd=models)
    assert p.returncode == 0, p.stderr
    assert "=== program train:" in p.stdout
    assert not (models / "mlp_digits.dlc").exists() and "wrote" not in p.stderr


def test_emit_an_unknown_stage_is_a_usage_error_listing_the_stages(dlc_run, models):
    p = dlc_run("compile", "mlp_digits.dl", "--emit", "lower", cwd=models)
    assert p.returncode == 2
    assert "'lower'" in p.stderr
    for stage in ("parse", "build", "verify", "autodiff", "optimizer", "simplify", "fuse", "plan", "codegen"):
        assert f"'{stage}'" in p.stderr
