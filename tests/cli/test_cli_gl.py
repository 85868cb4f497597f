"""The command line on the GL backend and on compiled artifact folders (OpenGL needed).

Small on purpose: llvmpipe is exact but slow. Each result is compared with the same
command on the numpy backend (the reference).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gl

ROOT = Path(__file__).resolve().parents[2]
QUAD = ROOT / "samples" / "data" / "quadratic.npz"


def losses(path: Path) -> np.ndarray:
    with open(path, newline="") as f:
        return np.array([float(r["loss"]) for r in csv.DictReader(f)])


def fetched(dlc_run, model, *args, cwd: Path, out: str) -> dict[str, np.ndarray]:
    p = dlc_run("eval", model, "--data", QUAD, "--fetch", "y,cost", "--out", out, *args, cwd=cwd)
    assert p.returncode == 0, p.stderr
    with np.load(cwd / out) as z:
        return {k: z[k] for k in z.files}


def test_eval_gl_matches_numpy(dlc_run, models):
    gl = fetched(dlc_run, "quadratic.dl", "--backend", "gl", "--batch-size", "64", cwd=models, out="gl.npz")
    ref = fetched(dlc_run, "quadratic.dl", "--backend", "numpy", cwd=models, out="np.npz")
    for k in ref:
        np.testing.assert_allclose(gl[k], ref[k], rtol=1e-5, atol=1e-6)


def test_train_gl_matches_numpy(dlc_run, models):
    for backend in ("gl", "numpy"):
        p = dlc_run(
            "train",
            "quadratic.dl",
            "--data",
            QUAD,
            "--steps",
            15,
            "--optimizer",
            "adam",
            "--lr",
            "0.05",
            "--backend",
            backend,
            "--log",
            f"{backend}.csv",
            "--save",
            f"{backend}.npz",
            cwd=models,
        )
        assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(losses(models / "gl.csv"), losses(models / "numpy.csv"), rtol=1e-4)
    with np.load(models / "gl.npz") as g, np.load(models / "numpy.npz") as n:
        for k in "abc":
            np.testing.assert_allclose(g[k], n[k], rtol=1e-4, atol=1e-6)


def test_artifact_folder_eval_and_check(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run("check", "quadratic.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert ["param", "a", "[]", "1"] in [line.split() for line in p.stdout.splitlines()]
    art = fetched(dlc_run, "quadratic.dlc", cwd=models, out="art.npz")
    ref = fetched(dlc_run, "quadratic.dl", "--backend", "numpy", cwd=models, out="np.npz")
    for k in ref:
        np.testing.assert_allclose(art[k], ref[k], rtol=1e-5, atol=1e-6)
    # The folder holds its model.dl: --backend numpy runs it with the artifact's params.
    art_np = fetched(dlc_run, "quadratic.dlc", "--backend", "numpy", cwd=models, out="art_np.npz")
    for k in ref:
        np.testing.assert_allclose(art_np[k], ref[k], rtol=1e-6, atol=1e-7)
    assert (
        "backend numpy"
        in dlc_run("eval", "quadratic.dlc", "--data", QUAD, "--fetch", "y", "--backend", "numpy", cwd=models).stderr
    )


def test_artifact_folder_train(dlc_run, models):
    p = dlc_run("compile", "quadratic.dl", "--train", "--optimizer", "momentum", cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run(
        "train", "quadratic.dlc", "--data", QUAD, "--steps", 10, "--lr", "0.005", "--log", "art.csv", cwd=models
    )
    assert p.returncode == 0, p.stderr
    assert (models / "quadratic.weights.npz").is_file()  # beside the folder, named for the model
    p = dlc_run(
        "train",
        "quadratic.dl",
        "--data",
        QUAD,
        "--steps",
        10,
        "--lr",
        "0.005",
        "--optimizer",
        "momentum",
        "--backend",
        "numpy",
        "--log",
        "np.csv",
        "--save",
        "np.npz",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(losses(models / "art.csv"), losses(models / "np.csv"), rtol=1e-4)
    p = dlc_run("train", "quadratic.dlc", "--data", QUAD, "--steps", 1, "--optimizer", "adam", cwd=models)
    assert p.returncode == 1 and "compiled with the momentum optimizer" in p.stderr


def test_weights_from_an_artifact_load_into_the_model(dlc_run, models):
    assert dlc_run("compile", "quadratic.dl", "--train", cwd=models).returncode == 0
    p = dlc_run("train", "quadratic.dlc", "--data", QUAD, "--steps", 3, cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run(
        "eval",
        "quadratic.dl",
        "--data",
        QUAD,
        "--fetch",
        "cost",
        "--backend",
        "numpy",
        "--weights",
        "quadratic.weights.npz",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
