"""What a PyTorch or Keras user types on the first week: flags as typed elsewhere (each error
naming the flag and the one meant), outputs in the working folder, an artifact replaced
only with a warning, metrics, --early-stop and --keep-best, `dlc info MODEL`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
DATA = SAMPLES / "data"

QUAD = DATA / "quadratic.npz"


@pytest.mark.parametrize(
    "typed, meant",
    [
        (["--learning-rate", "0.1"], "--lr"),
        (["--epoch", "3"], "--epochs"),  # an abbreviation is not taken
        (["--batch", "8"], "--batch-size"),
        (["--batch_size", "8"], "--batch-size"),
        (["--optimiser", "adam"], "--optimizer"),
        (["--early-stopping", "2"], "--early-stop"),
    ],
)
def test_unknown_flags_are_refused_by_the_command_with_the_flag_meant(dlc_run, models, typed, meant):
    p = dlc_run("train", "quadratic.dl", "--data", QUAD, "--backend", "numpy", *typed, cwd=models)
    assert p.returncode == 2
    assert f"dlc train: error: unrecognized arguments: {' '.join(typed)} (did you mean {meant}?)" in p.stderr
    assert "usage: dlc train" in p.stderr and not (models / "quadratic.weights.npz").exists()


def test_optimizer_names_are_case_insensitive(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", "--train", "--optimizer", "Adam", "-o", "q.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert json.loads((models / "q.dlc" / "manifest.json").read_text())["train"]["optimizer"]["name"] == "adam"


def test_outputs_land_in_the_working_folder(dlc_run, tmp_path):
    p = dlc_run("train", SAMPLES / "quadratic.dl", "--data", QUAD, "--steps", 3, "--backend", "numpy", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "weights saved to quadratic.weights.npz" in p.stdout and (tmp_path / "quadratic.weights.npz").is_file()
    p = dlc_run("compile", SAMPLES / "quadratic.dl", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "quadratic.dlc" / "manifest.json").is_file()
    assert not (SAMPLES / "quadratic.weights.npz").exists() and not (SAMPLES / "quadratic.dlc").exists()


def test_compile_says_when_it_replaces_a_different_artifact(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", "--train", "--optimizer", "adam", cwd=models)
    assert p.returncode == 0 and "warning" not in p.stderr
    p = dlc_run("compile", "quadratic.dl", "--emit", "glsl", "-o", "quadratic.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert (
        "warning: quadratic.dlc held a training artifact of quadratic.dl (adam, loss cost); "
        "it now holds an eval-only artifact of quadratic.dl"
    ) in p.stderr
    p = dlc_run("compile", "quadratic.dl", cwd=models)  # the same kind again: nothing to say
    assert p.returncode == 0 and "warning" not in p.stderr


def test_metrics_early_stop_and_keep_best(dlc_run, models):
    args = ["train", "mlp_digits.dl", "--data", DATA / "digits_train.npz", "--val", DATA / "digits_test.npz"]
    args += ["--optimizer", "sgd", "--lr", "1.5", "--epochs", "12", "--backend", "numpy", "--log", "log.csv"]
    p = dlc_run(*args, "--early-stop", "2", "--keep-best", "--metric", "accuracy", cwd=models)
    assert p.returncode == 0, p.stderr
    with open(models / "log.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["val_loss"]]
    val = [float(r["val_loss"]) for r in rows]
    best = int(np.argmin(val))
    # Stopped after 2 epochs without a better val loss, or ran all 12.
    assert len(val) == 12 or (len(val) == best + 3 and f"stopped early after epoch {best + 3}" in p.stdout)
    assert f"kept the params of epoch {best + 1} (the best val cost)" in p.stdout
    assert "val accuracy" in p.stdout + p.stderr and "val_accuracy" in rows[0]
    # The summary's val line is of the kept params: the best epoch's val loss again.
    assert f"of the saved params (the best epoch's): cost {val[best]:.6g}" in p.stdout


def test_metric_flags_are_checked(dlc_run, models):
    base = ["train", "mlp_digits.dl", "--data", DATA / "digits_train.npz", "--backend", "numpy"]
    p = dlc_run(*base, "--early-stop", "2", cwd=models)
    assert p.returncode == 2 and "--early-stop works on the validation data: give --val FILE" in p.stderr
    p = dlc_run(*base, "--val", DATA / "digits_test.npz", "--keep-best", "--workers", "2", cwd=models)
    assert p.returncode == 2 and p.stderr.count("--keep-best is not available with several workers") == 1
    p = dlc_run(*base, "--val", DATA / "digits_test.npz", "--metric", "acuracy", cwd=models)
    assert p.returncode == 1
    assert "metric 'acuracy' is not a named tensor of the model, did you mean 'accuracy'?" in p.stderr
    p = dlc_run(*base, "--val", DATA / "digits_test.npz", "--metric", "probs", cwd=models)
    assert p.returncode == 1 and "metric 'probs' must be a scalar, but its shape is ['B', 10]" in p.stderr


def test_info_lists_params_per_layer(dlc_run):
    p = dlc_run("info", SAMPLES / "lstm.dl")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[2].split()[0] == "lstm" and lines[2].endswith("1,280")  # 4 * 16 * (2 + 16 + 2)
    assert lines[3].split()[0] == "head" and lines[3].endswith("17")
    assert "total: 1,297 params in 2 layers (1,297 trainable, 0 frozen)" in p.stdout


METRIC_MODEL = """input x: [B]
input y_label: [B]
param a: [] = 0
y = a * x
loss cost = mean_squared(y, y_label)
metric mae = mean(abs(y - y_label))
"""


def test_a_metric_statement_is_checked_listed_and_reported(dlc_run, tmp_path):
    (tmp_path / "m.dl").write_text(METRIC_MODEL)
    p = dlc_run("check", "m.dl", cwd=tmp_path)
    assert p.returncode == 0 and "metric  mae      []" in p.stdout, p.stdout
    p = dlc_run("train", "m.dl", "--data", QUAD, "--val", QUAD, "--backend", "numpy", "--log", "l.csv", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "l.csv", newline="") as f:
        last = [r for r in csv.DictReader(f) if r["val_mae"]][-1]
    with np.load(QUAD) as d, np.load(tmp_path / "m.weights.npz") as w:
        want = np.mean(np.abs(float(w["a"]) * d["x"].astype(np.float64) - d["y_label"]))
    assert float(last["val_mae"]) == pytest.approx(want, rel=1e-5)
    assert f"mae {float(last['val_mae']):.4g}" in p.stdout
    (tmp_path / "bad.dl").write_text(METRIC_MODEL.replace("mean(abs(y - y_label))", "abs(y - y_label)"))
    p = dlc_run("check", "bad.dl", cwd=tmp_path)
    assert p.returncode == 1 and "bad.dl:6:14: error: metric 'mae' must be a scalar, but its shape is [B]" in p.stderr
