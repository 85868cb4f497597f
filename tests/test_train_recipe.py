"""The training recipe: AdamW, learning-rate schedules and gradient clipping, compiled into
the step, against torch.optim.AdamW, its LR schedulers and clip_grad_norm_, and closed forms."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import dlc
from dlc.runtime import schedules
from dlc.runtime.errors import DlcError

torch = pytest.importorskip("torch")

MODEL = """
input x: [B, 4]
input y: [B, 3]
param W: [4, 3] = normal(0, 1)
param b: [3] = normal(0, 1)
loss cost = mean_squared(x @ W + b, y)
"""

# d loss / d w = 1 for every element: SGD's step moves w by exactly -lr_t.
UNIT_GRADIENT = """
param w: [2] = zeros
loss l = sum(w)
"""


def _gl_or_skip():
    from dlc.runtime.device import get_context

    try:
        get_context()
    except dlc.RuntimeFailure as exc:
        pytest.skip(f"no OpenGL context: {exc}")


@pytest.fixture(params=["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def backend(request):
    if request.param == "gl":
        _gl_or_skip()
    return request.param


def _model(tmp_path, source):
    path = tmp_path / "m.dl"
    path.write_text(source)
    return dlc.compile(path)


def _data():
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((16, 4)).astype(np.float32),
        "y": rng.standard_normal((16, 3)).astype(np.float32),
    }


def _torch_run(params, data, steps, lr, weight_decay, clip, schedule):
    """The same steps in torch (float64): W decays, b does not (rank >= 2 rule)."""
    w = torch.tensor(params["W"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(params["b"], dtype=torch.float64, requires_grad=True)
    x, y = (torch.tensor(data[k], dtype=torch.float64) for k in ("x", "y"))
    opt = torch.optim.AdamW(
        [{"params": [w], "weight_decay": weight_decay}, {"params": [b], "weight_decay": 0.0}], lr=lr
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: schedule.lr(lr, t) / lr) if schedule else None
    for _ in range(steps):
        opt.zero_grad()
        ((x @ w + b - y) ** 2).mean().backward()
        if clip:
            torch.nn.utils.clip_grad_norm_([w, b], clip)
        opt.step()
        if sched:
            sched.step()
    return w.detach().numpy(), b.detach().numpy()


@pytest.mark.parametrize(
    "weight_decay, clip, schedule",
    [
        (0.1, 0.0, None),
        (0.0, 0.5, None),
        (0.1, 0.5, schedules.Cosine(warmup=3, decay_steps=20, min_lr=0.001)),
        (0.05, 1.0, schedules.Linear(warmup=2, decay_steps=25, min_lr=0.0)),
        (0.0, 0.0, schedules.Step(step_size=7, gamma=0.5)),
    ],
)
def test_adamw_clip_and_schedule_match_torch(tmp_path, backend, weight_decay, clip, schedule):
    model, data, steps = _model(tmp_path, MODEL), _data(), 30
    sess = dlc.Session(model, backend=backend, seed=0)
    start = {k: np.array(v) for k, v in sess.params.items()}
    opt = dlc.AdamW(0.05, weight_decay=weight_decay, clip_norm=clip, schedule=schedule)
    sess.train(data, optimizer=opt, batch_size=16, steps=steps)
    w, b = _torch_run(start, data, steps, 0.05, weight_decay, clip, schedule)
    tol = 2e-5 if backend == "numpy" else 1e-4
    np.testing.assert_allclose(sess.params["W"], w, atol=tol)
    np.testing.assert_allclose(sess.params["b"], b, atol=tol)


@pytest.mark.parametrize(
    "schedule",
    [
        schedules.Constant(warmup=4),
        schedules.Cosine(warmup=3, decay_steps=12, min_lr=0.02),
        schedules.Linear(decay_steps=10, min_lr=0.01),
        schedules.Step(warmup=2, step_size=3, gamma=0.5),
    ],
)
def test_compiled_schedule_is_the_python_rule(tmp_path, backend, schedule):
    # SGD on a unit gradient: after k steps w = -(lr_0 + ... + lr_{k-1}).
    sess = dlc.Session(_model(tmp_path, UNIT_GRADIENT), backend=backend, seed=0)
    sess.train({}, optimizer=dlc.SGD(0.1, schedule=schedule), steps=15)
    expected = -sum(schedule.lr(0.1, t) for t in range(15))
    np.testing.assert_allclose(sess.params["w"], [expected, expected], rtol=1e-5)


def test_schedules_against_closed_forms_and_torch():
    cos = schedules.Cosine(warmup=10, decay_steps=110, min_lr=1e-4)
    # nanoGPT's get_lr(it)
    for it in (0, 5, 9, 10, 60, 110, 500):
        if it < 10:
            want = 1e-3 * (it + 1) / 11
        else:
            ratio = min((it - 10) / 100, 1.0)
            want = 1e-4 + 0.5 * (1 + math.cos(math.pi * ratio)) * (1e-3 - 1e-4)
        assert cos.lr(1e-3, it) == pytest.approx(want)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.3)
    step_lr = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.25)
    ours = schedules.Step(step_size=4, gamma=0.25)
    for t in range(20):
        assert ours.lr(0.3, t) == pytest.approx(opt.param_groups[0]["lr"])
        opt.step()
        step_lr.step()


def test_clip_norm_against_torch(tmp_path, backend):
    model, data = _model(tmp_path, MODEL), _data()
    sess = dlc.Session(model, backend=backend, seed=0)
    start = {k: np.array(v) for k, v in sess.params.items()}
    sess.train(data, optimizer=dlc.SGD(0.1, clip_norm=0.3), batch_size=16, steps=5)
    w = torch.tensor(start["W"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(start["b"], dtype=torch.float64, requires_grad=True)
    x, y = (torch.tensor(data[k], dtype=torch.float64) for k in ("x", "y"))
    opt = torch.optim.SGD([w, b], lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        ((x @ w + b - y) ** 2).mean().backward()
        assert torch.nn.utils.clip_grad_norm_([w, b], 0.3) > 0.3  # the clip bites
        opt.step()
    tol = 1e-6 if backend == "numpy" else 1e-5
    np.testing.assert_allclose(sess.params["W"], w.detach().numpy(), atol=tol)


def test_bad_recipes_are_refused():
    with pytest.raises(DlcError, match="decay_steps"):
        schedules.Cosine(warmup=10, decay_steps=5)
    with pytest.raises(DlcError, match="clip_norm"):
        dlc.Adam(0.1, clip_norm=-1.0)
    with pytest.raises(DlcError, match="step_size"):
        schedules.Step(step_size=0)
    with pytest.raises(DlcError, match="unknown learning-rate schedule"):
        schedules.from_config({"name": "exp"})
    with pytest.raises(DlcError, match="no weight decay"):
        dlc.runtime.optimizers.make("sgd", weight_decay=0.1)


@pytest.mark.gl
def test_artifact_keeps_its_recipe(tmp_path):
    _gl_or_skip()
    import json

    from dlc.compiler.emit import write_artifact
    from dlc.runtime.artifact.manifest import ArtifactError, validate

    model = _model(tmp_path, UNIT_GRADIENT)
    sched = schedules.Cosine(warmup=2, decay_steps=8, min_lr=0.01)
    out = write_artifact(model, tmp_path / "a.dlc", train_loss="l", optimizer=dlc.SGD(0.1, schedule=sched))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["train"]["optimizer"]["schedule"] == {
        "name": "cosine",
        "warmup": 2,
        "decay_steps": 8,
        "min_lr": 0.01,
    }
    sess = dlc.load(out)
    sess.train({}, steps=10)
    np.testing.assert_allclose(sess.params["w"], -sum(sched.lr(0.1, t) for t in range(10)), rtol=1e-5)
    manifest["train"]["optimizer"]["schedule"]["min_lr"] = "0.01"
    with pytest.raises(ArtifactError, match="schedule.min_lr"):
        validate(manifest, "a.dlc")


def test_cli_recipe_flags(tmp_path):
    def train(*flags):
        return subprocess.run(
            [sys.executable, "-m", "dlc", "train", "samples/quadratic.dl", "--data", "samples/data/quadratic.npz"]
            + ["--backend", "numpy", "--save", str(tmp_path / "w.npz"), *flags],
            capture_output=True,
            text=True,
        )

    ok = train("--optimizer", "AdamW", "--lr", "0.1", "--weight-decay", "0", "--lr-decay", "cosine", "--warmup", "5")
    assert ok.returncode == 0, ok.stderr
    assert "weights saved" in ok.stdout
    bad = train("--optimizer", "adam", "--weight-decay", "0.1")
    assert bad.returncode == 2 and "the adam optimizer has no weight decay" in bad.stderr
    bad = train("--lr-decay", "step")
    assert bad.returncode == 2 and "--lr-decay step needs --step-size N" in bad.stderr
    bad = train("--decay-steps", "10")
    assert bad.returncode == 2 and "--decay-steps needs --lr-decay cosine or linear" in bad.stderr


def test_a_checkpoint_keeps_the_recipe_and_resumes_bitwise(tmp_path):
    model, data = _model(tmp_path, MODEL), _data()

    def opt():
        return dlc.AdamW(0.05, clip_norm=0.5, schedule=schedules.Cosine(warmup=3, decay_steps=20, min_lr=0.001))

    whole = dlc.Session(model, backend="numpy", seed=0)
    whole.train(data, optimizer=opt(), batch_size=4, steps=20)
    first = dlc.Session(model, backend="numpy", seed=0)
    first.train(data, optimizer=opt(), batch_size=4, steps=20, callback=lambda step, *_: step < 7)
    first.save_checkpoint(tmp_path / "run.ckpt.npz")
    again = dlc.Session(model, backend="numpy", seed=0)
    again.restore(tmp_path / "run.ckpt.npz")
    again.train(data, optimizer=opt(), batch_size=4, steps=20, resume=True)
    for k, v in whole.params.items():
        np.testing.assert_array_equal(again.params[k], v)
