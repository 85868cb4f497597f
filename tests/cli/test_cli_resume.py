"""Nothing lost: SIGTERM and SIGHUP stop `dlc train` as Ctrl-C does and write a checkpoint;
`--resume` goes on with it to the weights the uninterrupted run ends with (bitwise on numpy,
within float tolerance on GL); a save that fails (a read-only folder, a full disk, the
file-size limit) goes to a fallback file the error names, or says how to keep the params."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from dlc.cli import main
from dlc.runtime.checkpoint import read_checkpoint

ROOT = Path(__file__).resolve().parents[2]
QUAD = ROOT / "samples" / "data" / "quadratic.npz"
ADAM = ["--optimizer", "adam", "--lr", "0.05"]


def train_args(*extra) -> list[str]:
    return ["train", "quadratic.dl", "--data", str(QUAD), *ADAM, *map(str, extra)]


def interrupt(
    models: Path, sig: int, backend: str, *extra, ignored: int | None = None
) -> tuple[subprocess.Popen, str, str]:
    """A long run, stopped by `sig` once its first step is done (after `ignored`, sent first,
    with the run started ignoring it, as `nohup` starts one ignoring SIGHUP)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlc", *train_args("--steps", 10000000, "--backend", backend, *extra)],
        cwd=models,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(ignored, signal.SIG_IGN)) if ignored else None,
    )
    try:
        first = proc.stdout.readline()  # the progress line of step 1: training is under way
        assert "step 1/" in first, first + proc.stderr.read()
        if ignored:
            proc.send_signal(ignored)
            time.sleep(1)
            assert proc.poll() is None  # it goes on
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out, err


def weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return dict(z)


SGD = ["--optimizer", "sgd", "--lr", "0.1"]  # after ADAM in the command: the last one counts


@pytest.mark.parametrize(
    "sig, backend, opt",
    [
        (signal.SIGTERM, "numpy", []),
        (signal.SIGHUP, "numpy", SGD),
        pytest.param(signal.SIGTERM, "gl", [], marks=pytest.mark.gl),
        pytest.param(signal.SIGHUP, "gl", SGD, marks=pytest.mark.gl),
    ],
)
def test_a_signal_stops_saves_a_checkpoint_and_resume_ends_where_an_uninterrupted_run_does(
    dlc_run, models, sig, backend, opt
):
    proc, out, err = interrupt(models, sig, backend, "--save", "w.npz", *opt)
    assert proc.returncode == 128 + sig, err
    assert f"interrupted ({signal.Signals(sig).name}): stopping after this step" in out
    assert "interrupted: stopped early; checkpoint written to w.ckpt.npz" in err
    assert "Traceback" not in err and "weights saved to w.npz" in out
    ckpt = read_checkpoint(models / "w.ckpt.npz")
    done = ckpt.run.done
    assert 1 <= done < 10000000
    for name, value in weights(models / "w.npz").items():  # the checkpoint holds the weights saved
        assert np.array_equal(ckpt.params[name], value)
    assert "--resume w.ckpt.npz" in err  # the command that goes on

    # Going on to `done + 12` steps ends where a run of that many steps does, uninterrupted.
    total = done + 12
    resumed = dlc_run(*train_args("--steps", total, "--backend", backend, "--resume", "w.ckpt.npz", *opt), cwd=models)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming w.ckpt.npz: step {done} of {total} done" in resumed.stdout
    whole = dlc_run(*train_args("--steps", total, "--backend", backend, "--save", "whole.npz", *opt), cwd=models)
    assert whole.returncode == 0, whole.stderr
    got, want = weights(models / "quadratic.weights.npz"), weights(models / "whole.npz")
    for k in "abc":
        if backend == "numpy":
            assert np.array_equal(got[k], want[k]), k
        else:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_a_signal_ignored_at_the_start_stays_ignored(models):
    proc, out, err = interrupt(models, signal.SIGTERM, "numpy", ignored=signal.SIGHUP)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGHUP" not in out and "interrupted (SIGTERM)" in out


def test_checkpoint_every_n_steps_and_at_the_end(models, monkeypatch, capsys):
    from dlc.cli import train_outputs

    real, written = train_outputs.save_or_rescue, []

    def recording(path, arrays, what):
        if "meta" in arrays:
            written.append((path, json.loads(arrays["meta"].tobytes())["run"]["done"]))
        return real(path, arrays, what)

    monkeypatch.setattr(train_outputs, "save_or_rescue", recording)  # what dlc train writes with
    status, _, err = run_main(models, monkeypatch, capsys, "--checkpoint-every", 9, "--save", "a.npz")
    assert status == 0, err
    assert written == [("a.ckpt.npz", 9), ("a.ckpt.npz", 18), ("a.ckpt.npz", 27), ("a.ckpt.npz", 30)]
    assert read_checkpoint(models / "a.ckpt.npz").run.done == 30


def test_resume_from_a_checkpoint_of_a_shorter_run(dlc_run, models):
    p = dlc_run(*train_args("--steps", 9, "--backend", "numpy", "--checkpoint", "nine.npz"), cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run(*train_args("--steps", 20, "--backend", "numpy", "--resume", "nine.npz", "--save", "b.npz"), cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run(*train_args("--steps", 20, "--backend", "numpy", "--save", "a.npz"), cwd=models)
    assert p.returncode == 0, p.stderr
    got, want = weights(models / "b.npz"), weights(models / "a.npz")
    assert all(np.array_equal(got[k], want[k]) for k in "abc")
    # --init and eval --weights take a checkpoint's params alone
    p = dlc_run(*train_args("--steps", 1, "--lr", 1e-30, "--backend", "numpy", "--init", "nine.npz"), cwd=models)
    assert p.returncode == 0, p.stderr
    got, want = weights(models / "quadratic.weights.npz"), read_checkpoint(models / "nine.npz").params
    assert all(np.array_equal(got[k], want[k]) for k in "abc")
    p = dlc_run("eval", "quadratic.dl", "--data", QUAD, "--weights", "nine.npz", "--fetch", "cost", cwd=models)
    assert p.returncode == 0 and "cost = " in p.stdout, p.stderr


def test_resume_refuses_another_model_optimizer_or_init(dlc_run, models):
    p = dlc_run(*train_args("--steps", 3, "--backend", "numpy", "--checkpoint", "q.npz"), cwd=models)
    assert p.returncode == 0, p.stderr
    p = dlc_run(*train_args("--steps", 5, "--backend", "numpy", "--resume", "q.npz", "--optimizer", "sgd"), cwd=models)
    assert p.returncode == 1 and "error: the run being resumed trains with adam(" in p.stderr, p.stderr
    p = dlc_run(*train_args("--steps", 5, "--backend", "numpy", "--resume", "q.npz", "--init", "q.npz"), cwd=models)
    assert p.returncode == 2 and "--resume" in p.stderr
    p = dlc_run(
        "train", "linear.dl", "--data", ROOT / "samples" / "data" / "linear.csv", "--resume", "q.npz", cwd=models
    )
    assert p.returncode == 1 and "q.npz: the checkpoint belongs to another model" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


# -- a save that fails ------------------------------------------------------------------


def failing_folders(monkeypatch, folders: dict[Path, int]) -> None:
    """Writes into each folder fail with its errno (as a read-only folder or a full disk do)."""
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kw):
        for folder, code in folders.items():
            if dir is not None and Path(dir).resolve() == folder.resolve():
                raise OSError(code, os.strerror(code), dir)
        return real(*args, dir=dir, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def run_main(models: Path, monkeypatch, capsys, *extra) -> tuple[int, str, str]:
    monkeypatch.chdir(models)
    code = main(train_args("--steps", 30, "--backend", "numpy", *extra))
    out, err = capsys.readouterr()
    return code, out, err


def reference(models: Path, monkeypatch, capsys) -> dict[str, np.ndarray]:
    code, _, err = run_main(models, monkeypatch, capsys, "--save", "ref.npz")
    assert code == 0, err
    return weights(models / "ref.npz")


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_a_read_only_folder_saves_to_the_working_folder(models, monkeypatch, capsys, code):
    want = reference(models, monkeypatch, capsys)
    (models / "ro").mkdir()
    failing_folders(monkeypatch, {models / "ro": code})
    status, out, err = run_main(models, monkeypatch, capsys, "--save", "ro/w.npz")
    rescued = models / f"w.rescued-{os.getpid()}.npz"
    assert status == 1
    assert f"error: cannot write ro/w.npz ({os.strerror(code)}): the trained params were saved to {rescued}" in err
    assert f"weights saved to {rescued}" in out and "internal error" not in err
    got = weights(rescued)
    assert all(np.array_equal(got[k], want[k]) for k in "abc")


def test_a_real_read_only_folder(models, monkeypatch, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders (the simulated ones above stand in)")
    (models / "ro").mkdir()
    os.chmod(models / "ro", 0o555)
    status, _, err = run_main(models, monkeypatch, capsys, "--save", "ro/w.npz")
    assert status == 1 and "the trained params were saved to" in err
    assert (models / f"w.rescued-{os.getpid()}.npz").exists()


def test_a_full_disk_falls_back_to_the_temp_folder(models, monkeypatch, capsys, tmp_path_factory):
    want = reference(models, monkeypatch, capsys)
    spare = tmp_path_factory.mktemp("spare")
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    failing_folders(monkeypatch, {models: errno.ENOSPC})
    status, _, err = run_main(models, monkeypatch, capsys, "--save", "w.npz")
    rescued = spare / f"w.rescued-{os.getpid()}.npz"
    assert status == 1
    assert f"cannot write w.npz (No space left on device): the trained params were saved to {rescued}" in err
    got = weights(rescued)
    assert all(np.array_equal(got[k], want[k]) for k in "abc")
    assert not list(models.glob("*.tmp")) and not list(models.glob(".*.tmp"))


def test_nowhere_to_write_says_how_to_keep_the_params(models, monkeypatch, capsys, tmp_path_factory):
    spare = tmp_path_factory.mktemp("spare")
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    failing_folders(monkeypatch, {models: errno.ENOSPC, spare: errno.ENOSPC})
    status, out, err = run_main(models, monkeypatch, capsys, "--save", "w.npz", "--checkpoint-every", 10)
    assert status == 1 and "internal error" not in err
    assert "weights NOT saved" in out
    assert "warning: cannot save the checkpoint: every place tried failed" in out
    assert (
        "error: cannot save the trained params: every place tried failed: w.npz (No space left on device); "
        f"{models / f'w.rescued-{os.getpid()}.npz'} (No space left on device); "
        f"{spare / f'w.rescued-{os.getpid()}.npz'} (No space left on device); "
        "free space on the disk (or give --save another place) and run again"
    ) in err


def test_the_file_size_limit(models):
    """RLIMIT_FSIZE 0: every write fails with EFBIG (Python ignores SIGXFSZ)."""
    p = subprocess.run(
        [sys.executable, "-m", "dlc", *train_args("--steps", 5, "--backend", "numpy", "--save", "w.npz")],
        cwd=models,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY)),
    )
    assert p.returncode == 1, p.stderr
    assert "cannot save the trained params" in p.stderr and "File too large" in p.stderr
    assert "raise the file-size limit (ulimit -f)" in p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert not (models / "w.npz").exists()
