"""`dlc train` on the numpy backend: weights, log, plot, val, Ctrl-C, divergence, refusals;
Ctrl-C and divergence on GL too, where losses are read a window of steps at a time."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlc

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "samples" / "data"
QUAD = DATA / "quadratic.npz"


def read_log(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_train_quadratic_writes_weights_and_log(dlc_run, models):
    p = dlc_run(
        "train", "quadratic.dl", "--data", QUAD, "--steps", 200, "--backend", "numpy", "--log", "log.csv", cwd=models
    )
    assert p.returncode == 0, p.stderr
    weights = models / "quadratic.weights.npz"  # the default: beside the model
    assert f"weights saved to {weights.name}" in p.stdout
    assert "200 steps" in p.stdout and "examples/s" in p.stdout
    with np.load(weights) as w:
        # the data is 3x^2 + 2x + 1 plus noise (std 0.1)
        np.testing.assert_allclose([w["a"], w["b"], w["c"]], [3, 2, 1], atol=0.25)
    rows = read_log(models / "log.csv")
    assert list(rows[0]) == ["step", "epoch", "loss"]
    assert [int(r["step"]) for r in rows] == list(range(1, 201))
    assert int(rows[-1]["epoch"]) == 29  # 200 examples in batches of 32: 7 steps an epoch
    losses = [float(r["loss"]) for r in rows]
    assert losses[-1] < 0.05 < losses[0]


def test_init_and_save(dlc_run, models):
    init = models / "start.npz"
    np.savez(init, a=np.float32(3), b=np.float32(2), c=np.float32(1))
    p = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--steps",
        3,
        "--lr",
        "1e-6",
        "--init",
        init,
        "--save",
        "out/w.npz",
        "--backend",
        "numpy",
        "--log",
        "log.csv",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    assert not (models / "quadratic.weights.npz").exists()
    with np.load(models / "out" / "w.npz") as w:
        np.testing.assert_allclose([w["a"], w["b"], w["c"]], [3, 2, 1], atol=1e-3)
    assert float(read_log(models / "log.csv")[0]["loss"]) < 0.05  # starts at the noise floor


def test_train_csv_data(dlc_run, models, tmp_path):
    data = tmp_path / "lin.csv"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3))
    rows = ["x.0,x.1,x.2,label"] + [f"{a},{b},{c},{a + 2 * b + 3 * c}" for a, b, c in x]
    data.write_text("\n".join(rows) + "\n")
    p = dlc_run(
        "train",
        "linear.dl",
        "--data",
        data,
        "--epochs",
        40,
        "--batch-size",
        16,
        "--optimizer",
        "sgd",
        "--lr",
        "0.05",
        "--backend",
        "numpy",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    with np.load(models / "linear.weights.npz") as w:
        np.testing.assert_allclose(w["multiplier"], [[1, 2, 3]], atol=0.05)


def test_unknown_loss(dlc_run, models):
    p = dlc_run("train", "quadratic.dl", "--data", QUAD, "--loss", "cots", "--backend", "numpy", cwd=models)
    assert p.returncode == 1 and "did you mean 'cost'?" in p.stderr
    assert not (models / "quadratic.weights.npz").exists()


def test_model_without_loss(dlc_run, tmp_path):
    (tmp_path / "m.dl").write_text("input x: [B]\ny = x * 2\n")
    np.savez(tmp_path / "d.npz", x=np.ones(3))
    p = dlc_run("train", "m.dl", "--data", "d.npz", "--backend", "numpy", cwd=tmp_path)
    assert p.returncode == 1 and "no loss to train" in p.stderr


@pytest.mark.parametrize("flag", ["--data", "--val"])
def test_bad_data_is_refused_before_training_and_nothing_written(dlc_run, models, flag):
    bad = models / "bad.csv"
    bad.write_text("x,y_label\n1,2\n3,oops\n")
    good = ["--data", QUAD] if flag == "--val" else []
    p = dlc_run(
        "train",
        "quadratic.dl",
        *good,
        flag,
        bad,
        "--steps",
        5,
        "--backend",
        "numpy",
        "--log",
        "log.csv",
        "--save",
        "w.npz",
        cwd=models,
    )
    assert p.returncode == 1
    assert f"{bad}:3: column 'y_label' holds 'oops'" in p.stderr
    assert "step" not in p.stdout  # no training step ran
    assert sorted(f.name for f in models.iterdir()) == ["bad.csv", "linear.dl", "mlp_digits.dl", "quadratic.dl"]


def test_plot_without_matplotlib_stops_before_training(dlc_run, models, tmp_path):
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")])}
    p = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--steps",
        5,
        "--backend",
        "numpy",
        "--plot",
        "loss.png",
        env=env,
        cwd=models,
    )
    assert p.returncode == 1
    assert len(p.stderr.strip().splitlines()) == 1
    assert "--plot needs matplotlib" in p.stderr and "dlc[plot]" in p.stderr
    assert "step" not in p.stdout
    assert not (models / "quadratic.weights.npz").exists() and not (models / "loss.png").exists()


def test_plot(dlc_run, models):
    pytest.importorskip("matplotlib", reason="matplotlib (the dlc[plot] extra) is not installed")
    p = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--epochs",
        3,
        "--val",
        QUAD,
        "--backend",
        "numpy",
        "--plot",
        "loss.png",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    assert (models / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "loss curve written to loss.png" in p.stdout


BACKENDS = ["numpy", pytest.param("gl", marks=pytest.mark.gl)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_divergence_exits_1_and_keeps_the_last_finite_params(dlc_run, models, backend):
    p = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--steps",
        200,
        "--lr",
        "10",
        "--backend",
        backend,
        "--log",
        "log.csv",
        cwd=models,
    )
    assert p.returncode == 1
    assert "training diverged at step" in p.stderr and "Traceback" not in p.stderr
    with np.load(models / "quadratic.weights.npz") as w:
        assert all(np.isfinite(w[k]).all() for k in "abc")
    rows = read_log(models / "log.csv")
    assert rows and all(np.isfinite(float(r["loss"])) for r in rows)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_stops_after_the_step_saves_and_exits_130(dlc_run, models, backend):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlc",
            "train",
            "quadratic.dl",
            "--data",
            str(QUAD),
            "--steps",
            "10000000",
            "--backend",
            backend,
            "--log",
            "log.csv",
        ],
        cwd=models,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # the progress line of step 1: training is under way
        assert "step 1/" in first, first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert "weights saved to" in out
    assert (models / "quadratic.weights.npz").exists()
    steps = len(read_log(models / "log.csv"))
    assert 1 <= steps < 10000000
    # The weights saved are those of the last step logged (on GL, steps queued past it are
    # undone): the numpy backend trained that many steps from the same seed agrees.
    again = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--steps",
        steps,
        "--backend",
        "numpy",
        "--save",
        "again.npz",
        cwd=models,
    )
    assert again.returncode == 0, again.stderr
    with np.load(models / "quadratic.weights.npz") as got, np.load(models / "again.npz") as want:
        for k in "abc":
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_mlp_digits_reaches_95_percent(dlc_run, models):
    p = dlc_run(
        "train",
        "mlp_digits.dl",
        "--data",
        DATA / "digits_train.npz",
        "--val",
        DATA / "digits_test.npz",
        "--optimizer",
        "adam",
        "--lr",
        "0.01",
        "--epochs",
        10,
        "--seed",
        0,
        "--backend",
        "numpy",
        "--log",
        "log.csv",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    assert "val accuracy" in p.stdout
    rows = read_log(models / "log.csv")
    assert list(rows[0]) == ["step", "epoch", "loss", "val_loss", "val_accuracy"]
    val_rows = [r for r in rows if r["val_loss"]]
    assert len(val_rows) == 10 and all(r["val_accuracy"] for r in val_rows)

    out = models / "pred.npz"
    p = dlc_run(
        "eval",
        "mlp_digits.dl",
        "--data",
        DATA / "digits_test.npz",
        "--weights",
        "mlp_digits.weights.npz",
        "--fetch",
        "accuracy,prediction",
        "--backend",
        "numpy",
        "--out",
        out,
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    with np.load(out) as z, np.load(DATA / "digits_test.npz") as test:
        by_hand = float(np.mean(z["prediction"] == test["labels"]))
        assert float(z["accuracy"]) == pytest.approx(by_hand, abs=1e-6)
        assert by_hand >= 0.95
    assert float(val_rows[-1]["val_accuracy"]) == pytest.approx(by_hand, abs=1e-6)


DOTTED = """
input x: [B]
input y_label: [B]
def poly(x) {
    param a: [] = normal(0, 1)
    param b: [] = normal(0, 1)
    return a * x^2 + b * x
}
frozen param bias.c: [] = 0.5
y = poly(x) as model.poly + bias.c
loss cost = mean_squared(y, y_label)
"""


def test_freeze_keeps_matching_params_bitwise_and_saves_them(dlc_run, tmp_path):
    (tmp_path / "m.dl").write_text(DOTTED)
    init = tmp_path / "start.npz"
    start = {"model.poly.a": np.float32(0.25), "model.poly.b": np.float32(-1.5), "bias.c": np.float32(0.75)}
    np.savez(init, **start)
    args = ["train", "m.dl", "--data", QUAD, "--steps", 5, "--backend", "numpy", "--init", init]
    p = dlc_run(*args, "--freeze", "model.*.a", "--freeze", "nothing.else*", cwd=tmp_path)
    assert p.returncode == 1 and "freeze pattern 'nothing.else*' matches no param" in p.stderr
    assert not (tmp_path / "m.weights.npz").exists()  # refused before training
    p = dlc_run(*args, "--freeze", "model.*.a", "--optimizer", "adam", "--lr", "0.1", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with np.load(tmp_path / "m.weights.npz") as w:
        assert set(w.files) == set(start)  # frozen ones are saved too
        assert w["model.poly.a"] == start["model.poly.a"]  # --freeze: bitwise
        assert w["bias.c"] == start["bias.c"]  # `frozen param`: bitwise
        assert w["model.poly.b"] != start["model.poly.b"]  # the rest trains
    p = dlc_run(
        "eval",
        "m.dl",
        "--data",
        QUAD,
        "--weights",
        "m.weights.npz",
        "--fetch",
        "model.poly.a,cost",
        "--backend",
        "numpy",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    assert "model.poly.a = 0.25" in p.stdout


def test_a_log_that_cannot_be_written_loses_no_params(dlc_run, models):
    (models / "a_file").write_text("")
    args = ["train", "quadratic.dl", "--data", QUAD, "--steps", 5, "--backend", "numpy", "--save", "w.npz"]
    p = dlc_run(*args, "--log", "a_file/log.csv", cwd=models)
    assert p.returncode == 1
    assert "error: cannot write a_file/log.csv (--log): " in p.stderr and "Traceback" not in p.stderr
    assert "weights saved to w.npz" in p.stdout
    assert set(np.load(models / "w.npz")) == {"a", "b", "c"}


def test_the_summary_val_line_is_evaluate_over_the_val_file(dlc_run, models):
    args = ["train", "quadratic.dl", "--data", QUAD, "--val", QUAD, "--epochs", 2, "--batch-size", 48]
    p = dlc_run(*args, "--backend", "numpy", "--save", "w.npz", "--log", "log.csv", cwd=models)
    assert p.returncode == 0, p.stderr
    sess = dlc.Session(models / "quadratic.dl", backend="numpy")
    sess.load(models / "w.npz")
    want = float(sess.evaluate(dict(np.load(QUAD)), "cost"))
    line = next(x for x in p.stdout.splitlines() if x.startswith("  val ("))
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(want, rel=1e-5)
    rows = read_log(models / "log.csv")
    assert float(rows[-1]["val_loss"]) == pytest.approx(want, rel=1e-5)  # the last epoch's, same params
