"""Data-parallel training over MPI (dlc/distributed.py): 2 and 4 ranks started by mpiexec
train as one process does on the whole batch (numpy and GL), and faults stop every rank."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dlc import distributed

SCRIPT = Path(__file__).with_name("rank_train.py")


def _need_mpi():
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            raise AssertionError(f"CI must install mpi4py and mpich (pip install '.[mpi]'): {exc}") from None
        pytest.skip(f"mpi4py is not installed ({exc}): pip install 'dlc[mpi]'")
    if shutil.which("mpiexec") is None:
        if os.environ.get("CI"):
            raise AssertionError("CI must have mpiexec (pip install mpich)")
        pytest.skip("no mpiexec on PATH: pip install mpich")


def _run(tmp_path, ranks, backend, optimizer, steps=20, batch=16, fault="", timeout=120):
    out = tmp_path / f"{ranks}_{backend}_{optimizer}.npz"
    cmd = [sys.executable, str(SCRIPT), str(out), backend, optimizer, str(steps), str(batch), fault]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    env = {k: v for k, v in os.environ.items() if k not in distributed.SIZE_VARS}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return done, out


@pytest.mark.parametrize(
    "ranks, optimizer",
    [(2, "sgd"), (2, "adam"), (4, "adamw")],
)
def test_ranks_train_as_one_process_numpy(tmp_path, ranks, optimizer):
    _need_mpi()
    one, one_out = _run(tmp_path, 1, "numpy", optimizer, steps=30)
    many, many_out = _run(tmp_path, ranks, "numpy", optimizer, steps=30)
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    a, b = np.load(one_out), np.load(many_out)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.gl
def test_two_gl_ranks_train_as_one_process(tmp_path):
    _need_mpi()
    from dlc.runtime.device import get_context
    from dlc.runtime.errors import RuntimeFailure

    try:
        get_context()
    except RuntimeFailure as exc:
        pytest.skip(f"no OpenGL context: {exc}")
    one, one_out = _run(tmp_path, 1, "gl", "adam")
    many, many_out = _run(tmp_path, 2, "gl", "adam")
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    a, b = np.load(one_out), np.load(many_out)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_a_run_stopped_and_resumed_on_two_ranks_ends_as_one_process(tmp_path):
    _need_mpi()
    one, one_out = _run(tmp_path, 1, "numpy", "adam", steps=20)
    many, many_out = _run(tmp_path, 2, "numpy", "adam", steps=20, fault="resume")
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    a, b = np.load(one_out), np.load(many_out)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_a_rank_with_other_data_is_refused(tmp_path):
    _need_mpi()
    done, out = _run(tmp_path, 2, "numpy", "sgd", fault="data")
    assert done.returncode != 0 and not out.exists()
    assert "rank 1 differs from rank 0 in its data" in done.stderr


@pytest.mark.parametrize("fault", ["die", "hang"])
def test_a_dead_or_hung_rank_stops_the_others(tmp_path, fault):
    _need_mpi()
    start = time.monotonic()
    done, out = _run(tmp_path, 2, "numpy", "sgd", steps=50, fault=fault, timeout=60)
    assert time.monotonic() - start < 30
    assert done.returncode != 0 and not out.exists()
    if fault == "hang":
        assert "rank 0 of 2: the gradients of step 4 waited more than 3 s for the other ranks" in done.stderr


class _Comm:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("n, size", [(16, 2), (13, 4), (3, 4), (1, 3), (45, 7)])
def test_shards_cover_the_batch_in_order(n, size):
    shards = [distributed.World(_Comm(r, size)).shard(n) for r in range(size)]
    assert shards[0][0] == 0 and shards[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    lengths = [stop - start for start, stop in shards]
    assert max(lengths) - min(lengths) <= 1


def test_dlc_train_workers_matches_one_process(tmp_path):
    _need_mpi()
    env = {k: v for k, v in os.environ.items() if k not in distributed.SIZE_VARS}

    def train(save, *flags):
        cmd = [sys.executable, "-m", "dlc", "train", "samples/mlp_digits.dl", "--data", "samples/data/digits_train.npz"]
        cmd += ["--optimizer", "adam", "--lr", "0.01", "--steps", "12", "--backend", "numpy", "--save", str(save)]
        return subprocess.run([*cmd, *flags], capture_output=True, text=True, timeout=120, env=env)

    two = train(tmp_path / "two.npz", "--workers", "2")
    one = train(tmp_path / "one.npz")
    assert two.returncode == 0 and one.returncode == 0, two.stderr + one.stderr
    assert two.stdout.count("weights saved") == 1  # rank 0 alone reports and saves
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
    bad = train(tmp_path / "x.npz", "--devices", "0,1")
    assert bad.returncode == 2 and "--devices picks the ranks' devices" in bad.stderr
