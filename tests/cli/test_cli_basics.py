"""The command line's frame: version, help, exit codes, located errors, --debug, check."""

from __future__ import annotations

from pathlib import Path

import pytest

import dlc

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "errors"
COMMANDS = ("check", "compile", "train", "eval", "info")


def test_version(dlc_run):
    p = dlc_run("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"dlc {dlc.__version__}"


def test_help_lists_every_command_with_examples(dlc_run):
    p = dlc_run("--help")
    assert p.returncode == 0
    for c in COMMANDS:
        assert c in p.stdout
    assert "examples:" in p.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(dlc_run, command):
    p = dlc_run(command, "--help")
    assert p.returncode == 0
    assert p.stdout.startswith(f"usage: dlc {command}")
    assert "--debug" in p.stdout
    if command != "info":
        assert "example" in p.stdout


@pytest.mark.parametrize(
    "args",
    [
        (),  # no command
        ("frobnicate",),  # unknown command
        ("check",),  # missing MODEL
        ("eval", "samples/quadratic.dl", "--fetch", "y"),  # missing --data
        (
            "train",
            "samples/quadratic.dl",
            "--data",
            "samples/data/quadratic.npz",
            "--epochs",
            "2",
            "--steps",
            "3",
        ),  # exclusive flags
        ("train", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz", "--batch-size", "0"),
        ("train", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz", "--optimizer", "lbfgs"),
        ("train", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz", "--lr", "-1"),
        ("eval", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz", "--fetch", "y,,cost"),
        ("compile", "samples/quadratic.dl", "--emit", "asm"),
        ("compile", "samples/quadratic.dl", "--optimizer", "adam"),  # --optimizer needs --train
    ],
)
def test_usage_errors_exit_2(dlc_run, args):
    p = dlc_run(*args)
    assert p.returncode == 2, p.stderr
    assert "usage:" in p.stderr or "error:" in p.stderr
    assert "Traceback" not in p.stderr


def test_model_error_is_located_without_traceback(dlc_run):
    path = FIXTURES / "matmul_mismatch.dl"
    p = dlc_run("check", path)
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    assert lines[0] == f"{path}:5:12: error: matmul shapes [B, 64] and [32, 10] do not fit: 64 != 32"
    assert lines[1] == "    h = relu(x @ W1 + b1)"
    assert lines[2] == "    " + " " * 11 + "^"
    assert "Traceback" not in p.stderr and p.stdout == ""


@pytest.mark.parametrize(
    "command",
    [
        ("check",),
        ("compile", "--emit", "ir"),
        ("eval", "--data", "samples/data/quadratic.npz", "--fetch", "y", "--backend", "numpy"),
        ("train", "--data", "samples/data/quadratic.npz", "--backend", "numpy"),
    ],
)
def test_every_model_command_reports_model_errors(dlc_run, command, tmp_path):
    bad = tmp_path / "bad.dl"
    bad.write_text("input x: [B]\ny = x +* 2\n")
    p = dlc_run(command[0], bad, *command[1:], cwd=tmp_path)
    assert p.returncode == 1
    assert p.stderr.startswith(f"{bad}:2:8: error: syntax error")
    assert "Traceback" not in p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["bad.dl"]  # nothing written


def test_debug_shows_the_traceback(dlc_run):
    path = FIXTURES / "unknown_name.dl"
    for args in (("--debug", "check", path), ("check", path, "--debug")):
        p = dlc_run(*args)
        assert p.returncode == 1
        assert "Traceback" in p.stderr and "CompileError" in p.stderr
        assert "unknown name 'pixel', did you mean 'pixels'?" in p.stderr


def test_missing_model_file(dlc_run, tmp_path):
    p = dlc_run("check", tmp_path / "nope.dl")
    assert p.returncode == 1 and "no such file" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("name", ["quadratic", "linear", "mlp_digits"])
def test_check_samples(dlc_run, name):
    p = dlc_run("check", f"samples/{name}.dl")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"samples/{name}.dl: ok")


def test_check_table(dlc_run):
    p = dlc_run("check", "samples/mlp_digits.dl")
    rows = [line.split() for line in p.stdout.splitlines()]
    assert ["kind", "name", "shape", "size", "init"] in rows
    assert ["input", "pixels", "[B,", "64]"] in rows
    assert ["param", "W1", "[64,", "64]", "4,096", "he"] in rows
    assert ["param", "b2", "[10]", "10", "zeros"] in rows
    assert ["tensor", "accuracy", "[]"] in rows
    assert ["loss", "cost", "[]"] in rows
    assert "4 params (4,810 values)" in p.stdout
    assert "default loss 'cost'" in p.stdout


def test_check_source_without_trailing_newline_or_dl_suffix(dlc_run, tmp_path):
    model = tmp_path / "model.txt"
    model.write_text("input x: [B]\nloss s = sum(x)")
    p = dlc_run("check", model)
    assert p.returncode == 0, p.stderr
    assert ["loss", "s", "[]"] in [line.split() for line in p.stdout.splitlines()]


@pytest.mark.gl
def test_info(dlc_run):
    p = dlc_run("info")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"dlc {dlc.__version__}")
    assert "renderer" in p.stdout.lower() and "backend" in p.stdout.lower()


def test_check_takes_several_models_and_reports_each_bad_one(dlc_run):
    samples = sorted(str(p) for p in (ROOT / "samples").glob("*.dl"))
    p = dlc_run("check", *samples)
    assert p.returncode == 0, p.stderr
    assert all(f"{s}: ok" in p.stdout for s in samples)
    bad = FIXTURES / "matmul_mismatch.dl"
    p = dlc_run("check", samples[0], bad, samples[1])
    assert p.returncode == 1
    assert f"{samples[0]}: ok" in p.stdout and f"{samples[1]}: ok" in p.stdout
    assert f"{bad}:5:12: error: matmul shapes" in p.stderr
