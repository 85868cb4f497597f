"""Issue 15, a new user's first day: what `dlc train` and `dlc eval` say and what they accept.

The summary describes the params it saves, a closed pipe loses nothing, extra data arrays are
ignored with a notice, a start line names backend, target, device and weights.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "samples" / "data"

QUAD = DATA / "quadratic.npz"
DIGITS_TRAIN = DATA / "digits_train.npz"
DIGITS_TEST = DATA / "digits_test.npz"

SUMMARY_VAL = re.compile(
    r"of the saved params \((after step ([\d,]+)|[^)]*)\): cost (\S+), "
    r"accuracy ([\d.]+)"
)


def run_dlc(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlc", *map(str, args)], cwd=cwd or ROOT, capture_output=True, text=True, timeout=300
    )


def eval_values(model: Path, weights: Path, data: Path, cwd: Path) -> dict[str, float]:
    """cost and accuracy of `weights` on `data`, as `dlc eval` prints them."""
    p = run_dlc(
        "eval", model, "--data", data, "--weights", weights, "--fetch", "cost,accuracy", "--backend", "numpy", cwd=cwd
    )
    assert p.returncode == 0, p.stderr
    return {m[1]: float(m[2]) for m in re.finditer(r"^\s+(\w+) = (\S+)$", p.stdout, re.M)}


def check_summary_matches_saved(out: str, models: Path) -> int:
    """The summary's val numbers are those of the saved weights; returns the step it names."""
    m = SUMMARY_VAL.search(out)
    assert m, out
    truth = eval_values(models / "mlp_digits.dl", models / "w.npz", DIGITS_TEST, models)
    np.testing.assert_allclose(float(m[3]), truth["cost"], rtol=1e-5)
    assert abs(float(m[4]) - truth["accuracy"]) < 1e-4
    return int(m[2].replace(",", "")) if m[2] else -1


# -- 1: the summary evaluates what it saves ---------------------------------------------------


def test_summary_evaluates_the_saved_params_not_the_last_epoch_end(models):
    # 1,437 examples in batches of 64: 23 steps an epoch, so step 30 is not an epoch end.
    p = run_dlc(
        "train",
        "mlp_digits.dl",
        "--data",
        DIGITS_TRAIN,
        "--val",
        DIGITS_TEST,
        "--steps",
        30,
        "--batch-size",
        64,
        "--optimizer",
        "adam",
        "--lr",
        "0.01",
        "--backend",
        "numpy",
        "--save",
        "w.npz",
        cwd=models,
    )
    assert p.returncode == 0, p.stderr
    assert "epoch 1 (step 23): val cost" in p.stdout  # per-epoch lines name their step
    assert check_summary_matches_saved(p.stdout, models) == 30


def test_summary_after_ctrl_c_evaluates_the_saved_params(models):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlc",
            "train",
            "mlp_digits.dl",
            "--data",
            str(DIGITS_TRAIN),
            "--val",
            str(DIGITS_TEST),
            "--steps",
            "10000000",
            "--backend",
            "numpy",
            "--save",
            "w.npz",
            "--log",
            "log.csv",
        ],
        cwd=models,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()
        assert "step 1/" in first, first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    steps = len((models / "log.csv").read_text().splitlines()) - 1
    assert check_summary_matches_saved(out, models) == steps


# -- 2: a pipe closed early ----------------------------------------------------------------


def read_then_close(args: list, lines: int, cwd: Path) -> tuple[list[str], subprocess.Popen, str]:
    """Run dlc, read `lines` lines of its stdout, close the pipe (as `| head` does), wait."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlc", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        got = [proc.stdout.readline() for _ in range(lines)]
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return got, proc, err


def test_train_piped_into_head_still_saves(models):
    got, proc, err = read_then_close(
        [
            "train",
            "quadratic.dl",
            "--data",
            QUAD,
            "--steps",
            3000,
            "--batch-size",
            1,
            "--backend",
            "numpy",
            "--save",
            "q.npz",
        ],
        2,
        models,
    )
    assert "step 1/3000" in got[0]
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "internal error" not in err and "BrokenPipe" not in err
    with np.load(models / "q.npz") as z:
        assert sorted(z.files) == ["a", "b", "c"]


def test_eval_and_check_piped_into_head_exit_quietly(models, tmp_path):
    # More output than a pipe buffers (64 KiB), so dlc is still writing when the reader goes.
    many = tmp_path / "many.dl"
    names = [f"t{k}" for k in range(1200)]
    many.write_text("input x: [B]\n" + "".join(f"{n} = x * {k + 1}\n" for k, n in enumerate(names)))
    for args in (
        ["eval", many, "--data", QUAD, "--fetch", ",".join(names), "--backend", "numpy"],
        ["check", *["quadratic.dl"] * 400],
    ):
        got, proc, err = read_then_close(args, 1, models)
        assert got[0].strip(), err
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "internal error" not in err, err


# -- 3: extra arrays are ignored, with a notice ---------------------------------------------

AUTOENCODER = """\
input pixels: [B, 64]
param W: [64, 8] = glorot
param V: [8, 64] = glorot
code = tanh(pixels @ W)
loss cost = mean_squared(code @ V, pixels)
"""


def test_extra_arrays_are_ignored_with_one_notice(tmp_path):
    model = tmp_path / "ae.dl"
    model.write_text(AUTOENCODER)
    p = run_dlc(
        "train", model, "--data", DIGITS_TRAIN, "--steps", 3, "--backend", "numpy", "--save", tmp_path / "ae.npz"
    )
    assert p.returncode == 0, p.stderr
    notes = [line for line in p.stderr.splitlines() if "ignoring" in line]
    assert len(notes) == 1 and "'labels'" in notes[0] and str(DIGITS_TRAIN) in notes[0]
    csv = tmp_path / "d.csv"
    csv.write_text("x,y_label,comment\n1,2,first\n2,5,second\n")
    p = run_dlc("eval", "samples/quadratic.dl", "--data", csv, "--fetch", "cost", "--backend", "numpy")
    assert p.returncode == 0, p.stderr
    assert "ignoring column 'comment'" in p.stderr


def test_missing_input_is_refused_and_a_misspelling_suggested(tmp_path):
    data = tmp_path / "typo.npz"
    x = np.ones(4, np.float32)
    np.savez(data, x=x, y_lable=x)
    p = run_dlc("eval", "samples/quadratic.dl", "--data", data, "--fetch", "cost", "--backend", "numpy")
    assert p.returncode == 1
    assert "input 'y_label' is missing" in p.stderr and "'y_lable': a misspelling" in p.stderr


# -- 4: one line says where and with what it runs -------------------------------------------


def test_start_line_names_backend_target_device_and_weights(models):
    p = run_dlc(
        "eval", "quadratic.dl", "--data", QUAD, "--fetch", "cost", "--backend", "numpy", "--seed", 3, cwd=models
    )
    assert p.returncode == 0, p.stderr
    first = p.stderr.splitlines()[0]
    assert first.startswith("dlc: backend numpy, target compute, device ")
    assert "weights: initial params, seed 3" in first
    assert "warning: no --weights given" in p.stderr
    p = run_dlc(
        "train", "quadratic.dl", "--data", QUAD, "--steps", 2, "--backend", "numpy", "--save", "w.npz", cwd=models
    )
    assert "backend numpy, target compute" in p.stderr.splitlines()[0]
    p = run_dlc(
        "eval",
        "quadratic.dl",
        "--data",
        QUAD,
        "--fetch",
        "cost",
        "--backend",
        "numpy",
        "--weights",
        "w.npz",
        cwd=models,
    )
    assert "weights: w.npz" in p.stderr and "warning" not in p.stderr


def test_readme_python_quickstart_runs():
    """The README's quickstart block runs as written, and uses the data it loads."""
    text = (ROOT / "README.md").read_text()
    start = text.index("From Python:")
    block = text[
        text.index("```python", start) + len("```python") : text.index("```", text.index("```python", start) + 3)
    ]
    assert "data[" in block or "data)" in block
    p = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


# -- 8: the plan's sizes ---------------------------------------------------------------------


def test_plan_prints_one_float_and_symbolic_sizes_plainly(models):
    p = run_dlc("compile", "quadratic.dl", "--emit", "plan", "-o", "q.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert "param a  (1 float, 4 B)" in p.stdout and "input x  (B floats," in p.stdout
    assert "1 floats" not in p.stdout and "B*1" not in p.stdout and "1*B" not in p.stdout
    p = run_dlc("compile", "mlp_digits.dl", "--emit", "plan", "-o", "m.dlc", cwd=models)
    assert "(B*64 floats," in p.stdout and "(64 floats," in p.stdout


# -- 9: the model as a picture --------------------------------------------------------------


def dot_structure(text: str) -> tuple[dict[str, str], list[tuple[str, str, str]], list[str]]:
    """(node id -> label, edges (from, to, label), cluster labels) of DOT text from dlc."""
    nodes = dict(re.findall(r'^\s+(n\d+) \[label="((?:[^"\\]|\\.)*)"', text, re.M))
    edges = re.findall(r'^\s+(n\d+) -> (n\d+) \[(?:[^\]]*?)label="([^"]*)"', text, re.M)
    clusters = re.findall(r'subgraph cluster_\d+ \{\n\s+label="([^"]*)"', text)
    return nodes, edges, clusters


def test_emit_dot_draws_inputs_params_ops_names_and_losses_with_shapes(models):
    p = run_dlc("compile", "mlp_digits.dl", "--emit", "dot", "-o", "m.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith('digraph "mlp_digits" {') and p.stdout.rstrip().endswith("}")
    nodes, edges, clusters = dot_structure(p.stdout)
    labels = set(nodes.values())
    assert {
        r"input pixels\n[B, 64]",
        r"input labels\n[B]",
        r"param W1\n[64, 64]",
        r"param b2\n[10]",
        r"h\nrelu",
        r"logits\nadd",
        r"loss cost\nneg",
    } <= labels
    assert not clusters
    for a, b, shape in edges:  # every edge joins declared nodes and carries a shape
        assert a in nodes and b in nodes and re.fullmatch(r"\[[\w, ]*\]", shape)
    by_label = {v: k for k, v in nodes.items()}
    pixels = by_label[r"input pixels\n[B, 64]"]
    assert any(a == pixels and nodes[b] == "div" and s == "[B, 64]" for a, b, s in edges)
    assert any(b == by_label[r"h\nrelu"] and s == "[B, 64]" for a, b, s in edges)


def test_emit_dot_of_the_training_step_shows_updates(models):
    p = run_dlc("compile", "quadratic.dl", "--train", "--emit", "dot", "-o", "q.dlc", cwd=models)
    assert p.returncode == 0, p.stderr
    assert "training step" in p.stdout.splitlines()[0]
    for name in "abc":
        assert f'label="update {name}"' in p.stdout


def test_plot_model_without_graphviz_says_what_to_install(models, tmp_path):
    env_path = str(tmp_path / "empty-bin")  # no `dot` on this PATH
    p = subprocess.run(
        [sys.executable, "-m", "dlc", "plot-model", "quadratic.dl", "-o", "q.svg"],
        cwd=models,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": env_path},
    )
    assert p.returncode == 1, p.stdout
    assert "Graphviz" in p.stderr and "apt-get install graphviz" in p.stderr
    assert "--emit dot" in p.stderr and "Traceback" not in p.stderr
    assert not (models / "q.svg").exists()
    p = run_dlc("plot-model", "quadratic.dl", "-o", "q.gif", cwd=models)
    assert p.returncode == 2 and ".svg, .png or .pdf" in p.stderr


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz's dot program is not installed (apt-get install graphviz)"
)
def test_plot_model_draws_svg_and_png_with_kernel_clusters(models):
    p = run_dlc("plot-model", "mlp_digits.dl", "-o", "m.svg", "--kernels", cwd=models)
    assert p.returncode == 0, p.stderr
    svg = (models / "m.svg").read_text()
    assert "<svg" in svg and "k01_matmul_add_relu" in svg and "input pixels" in svg
    assert svg.count('class="cluster"') >= 5
    p = run_dlc("plot-model", "quadratic.dl", "-o", "q.png", cwd=models)
    assert p.returncode == 0, p.stderr
    assert (models / "q.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz's dot program is not installed (apt-get install graphviz)"
)
def test_dot_program_draws_without_the_python_package():
    from dlc.compiler.dot import _render_with_dot

    assert b"<svg" in _render_with_dot('digraph "g" { a -> b }', "svg")


# -- 7: an artifact folder runs on the numpy backend ------------------------------------------


def test_artifact_trains_on_the_numpy_backend_with_its_compiled_optimizer(models):
    p = run_dlc("compile", "quadratic.dl", "--train", "--optimizer", "momentum", cwd=models)
    assert p.returncode == 0, p.stderr
    common = ("--data", QUAD, "--steps", 10, "--lr", "0.005", "--backend", "numpy")
    p = run_dlc("train", "quadratic.dlc", *common, "--save", "art.npz", cwd=models)
    assert p.returncode == 0, p.stderr
    assert "backend numpy" in p.stderr and "the artifact's params" in p.stderr
    p = run_dlc("train", "quadratic.dl", *common, "--optimizer", "momentum", "--save", "src.npz", cwd=models)
    assert p.returncode == 0, p.stderr
    with np.load(models / "art.npz") as a, np.load(models / "src.npz") as b:
        for k in "abc":
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6)
    p = run_dlc("eval", "quadratic.dlc", "--data", QUAD, "--fetch", "cost", "--backend", "numpy", cwd=models)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
