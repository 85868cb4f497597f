"""`dlc eval`: values against the NumPy reference computed here, batching, --out, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.compiler.initializers import initial_value

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "samples" / "data"


def quadratic_by_hand(seed: int = 0) -> tuple[np.ndarray, float]:
    """y and cost of samples/quadratic.dl from its initial params, in float64 NumPy."""
    graph = dlc.compile(ROOT / "samples" / "quadratic.dl").graph
    a, b, c = (float(initial_value(graph.node(n).attr("init"), (), seed, n)) for n in "abc")
    z = np.load(DATA / "quadratic.npz")
    x, label = z["x"].astype(np.float64), z["y_label"].astype(np.float64)
    y = a * x**2 + b * x + c
    return y, float(np.mean((y - label) ** 2))


def test_eval_prints_values(dlc_run):
    p = dlc_run(
        "eval", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz", "--fetch", "y", "--backend", "numpy"
    )
    assert p.returncode == 0, p.stderr
    y, _ = quadratic_by_hand()
    line = next(ln for ln in p.stdout.splitlines() if ln.strip().startswith("y:"))
    assert "[200]" in line
    first = [float(v) for v in line.split("[")[-1].rstrip(".]").replace("...", "").split(",") if v.strip()]
    np.testing.assert_allclose(first, y[: len(first)], rtol=1e-5)
    assert "200 examples" in p.stdout


def test_eval_saves_fetches(dlc_run, tmp_path):
    out = tmp_path / "out.npz"
    p = dlc_run(
        "eval",
        "samples/quadratic.dl",
        "--data",
        "samples/data/quadratic.npz",
        "--fetch",
        "y,cost,a",
        "--backend",
        "numpy",
        "--out",
        out,
    )
    assert p.returncode == 0, p.stderr
    y, cost = quadratic_by_hand()
    with np.load(out) as z:
        assert sorted(z.files) == ["a", "cost", "y"]
        np.testing.assert_allclose(z["y"], y, rtol=1e-5)
        np.testing.assert_allclose(z["cost"], cost, rtol=1e-5)
    assert f"cost = {cost:.6g}"[:12] in p.stdout


@pytest.mark.parametrize("batch", [7, 64, 200, 1000])
def test_batches_concatenate_examples_and_average_scalars(dlc_run, tmp_path, batch):
    out = tmp_path / "out.npz"
    p = dlc_run(
        "eval",
        "samples/quadratic.dl",
        "--data",
        "samples/data/quadratic.npz",
        "--fetch",
        "y,cost",
        "--batch-size",
        batch,
        "--backend",
        "numpy",
        "--out",
        out,
    )
    assert p.returncode == 0, p.stderr
    y, cost = quadratic_by_hand()
    with np.load(out) as z:
        np.testing.assert_allclose(z["y"], y, rtol=1e-5)
        # cost is a mean over examples: the batch-size-weighted mean of batch costs is exact
        np.testing.assert_allclose(z["cost"], cost, rtol=1e-5)


def test_eval_csv(dlc_run, tmp_path):
    out = tmp_path / "out.npz"
    p = dlc_run(
        "eval",
        "samples/linear.dl",
        "--data",
        "samples/data/linear.csv",
        "--fetch",
        "y",
        "--backend",
        "numpy",
        "--out",
        out,
        "--seed",
        "3",
    )
    assert p.returncode == 0, p.stderr
    graph = dlc.compile(ROOT / "samples" / "linear.dl").graph
    m = initial_value(graph.node("multiplier").attr("init"), (1, 3), 3, "multiplier")
    x = np.array([[1, 2, 3], [10, 20, 30], [100, 200, 300]], dtype=np.float64)
    with np.load(out) as z:
        np.testing.assert_allclose(z["y"], (x @ m.T.astype(np.float64))[:, 0], rtol=1e-5)


def test_eval_with_weights(dlc_run, tmp_path):
    w = tmp_path / "w.npz"
    np.savez(w, a=np.float32(3), b=np.float32(2), c=np.float32(1))
    out = tmp_path / "out.npz"
    p = dlc_run(
        "eval",
        "samples/quadratic.dl",
        "--data",
        "samples/data/quadratic.npz",
        "--weights",
        w,
        "--fetch",
        "y",
        "--backend",
        "numpy",
        "--out",
        out,
    )
    assert p.returncode == 0, p.stderr
    x = np.load(DATA / "quadratic.npz")["x"].astype(np.float64)
    np.testing.assert_allclose(np.load(out)["y"], 3 * x**2 + 2 * x + 1, rtol=1e-5)


def test_only_the_inputs_a_fetch_needs_are_required(dlc_run, tmp_path):
    data = tmp_path / "x_only.npz"
    np.savez(data, x=np.linspace(-1, 1, 5, dtype=np.float32))
    p = dlc_run("eval", "samples/quadratic.dl", "--data", data, "--fetch", "y", "--backend", "numpy")
    assert p.returncode == 0, p.stderr
    p = dlc_run("eval", "samples/quadratic.dl", "--data", data, "--fetch", "cost", "--backend", "numpy")
    assert p.returncode == 1 and "input 'y_label' is missing" in p.stderr


def test_unknown_fetch_suggests_a_name(dlc_run, tmp_path):
    out = tmp_path / "out.npz"
    p = dlc_run(
        "eval",
        "samples/mlp_digits.dl",
        "--data",
        "samples/data/digits_test.npz",
        "--fetch",
        "accuracy,acuracy",
        "--backend",
        "numpy",
        "--out",
        out,
    )
    assert p.returncode == 1
    assert "no tensor named 'acuracy'" in p.stderr and "did you mean 'accuracy'?" in p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


def test_weights_that_do_not_fit(dlc_run, tmp_path):
    w = tmp_path / "w.npz"
    np.savez(w, a=np.ones(3, np.float32), b=np.float32(2), c=np.float32(1))
    p = dlc_run(
        "eval",
        "samples/quadratic.dl",
        "--data",
        "samples/data/quadratic.npz",
        "--weights",
        w,
        "--fetch",
        "y",
        "--backend",
        "numpy",
    )
    assert p.returncode == 1 and "param 'a'" in p.stderr and "Traceback" not in p.stderr
    p = dlc_run(
        "eval",
        "samples/quadratic.dl",
        "--data",
        "samples/data/quadratic.npz",
        "--weights",
        tmp_path / "none.npz",
        "--fetch",
        "y",
        "--backend",
        "numpy",
    )
    assert p.returncode == 1 and "no such file" in p.stderr


def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(file, expected message part) for data that does not fit samples/quadratic.dl."""
    cases = []

    def npz(name, msg, **arrays):
        np.savez(tmp_path / name, **arrays)
        cases.append((tmp_path / name, msg))

    def csv(name, msg, text):
        (tmp_path / name).write_text(text)
        cases.append((tmp_path / name, msg))

    x = np.linspace(-1, 1, 6, dtype=np.float32)
    npz("missing.npz", "input 'y_label' is missing", x=x)
    npz("rank.npz", "input 'x'", x=np.ones((6, 2)), y_label=x)
    npz("unequal.npz", "rows of unequal count", x=x, y_label=x[:4])
    npz("nan.npz", "NaN", x=np.where(x > 0.5, np.nan, x), y_label=x)
    csv("cell.csv", "bad.csv:3: column 'x' holds 'one'".replace("bad.csv", "cell.csv"), "x,y_label\n1,2\none,2\n")
    csv("gap.csv", "'x.1' is missing", "x.0,x.2,y_label\n1,2,3\n")
    csv("nan.csv", "nan.csv:4: input 'y_label' holds NaN", "x,y_label\n1,2\n3,4\n5,nan\n")
    return cases


def test_bad_data_is_refused_and_nothing_written(dlc_run, tmp_path):
    for data, message in bad_files(tmp_path):
        out = tmp_path / "out.npz"
        p = dlc_run(
            "eval", "samples/quadratic.dl", "--data", data, "--fetch", "y,cost", "--backend", "numpy", "--out", out
        )
        assert p.returncode == 1, (data.name, p.stdout)
        assert message in p.stderr, (data.name, p.stderr)
        assert str(data) in p.stderr
        assert "Traceback" not in p.stderr
        assert not out.exists()


def test_eval_feeds_i32_inputs_from_a_data_file_and_prints_ids_exactly(dlc_run, tmp_path):
    (tmp_path / "ids.dl").write_text("input t: i32[B, 2]\nback = reshape(t, [2, B])\n")
    np.savez(tmp_path / "ok.npz", t=np.array([[2**31 - 1, 0], [5, -7]], np.int64))
    p = dlc_run("eval", tmp_path / "ids.dl", "--data", tmp_path / "ok.npz", "--fetch", "back", "--backend", "numpy")
    assert p.returncode == 0, p.stderr
    assert "back: [2, 2]  min -7  max 2147483647  [2147483647, 0, 5, -7]" in p.stdout
    np.savez(tmp_path / "bad.npz", t=np.array([[1.0, 2.0], [3.0, 0.5]]))
    p = dlc_run("eval", tmp_path / "ids.dl", "--data", tmp_path / "bad.npz", "--fetch", "back", "--backend", "numpy")
    assert p.returncode != 0
    assert "bad.npz: array 't' holds 0.5 at row 1 (position [1, 1]), not an integer (an i32 input)" in p.stderr
