"""Each named stage of each golden model prints what expected/<model>/<stage>.txt holds (see
this package's docstring; `python -m tests.golden --update` rewrites them)."""

from __future__ import annotations

import pytest

from dlc.compiler.train_graph import build_train_graph

from . import texts
from .compare import stale_files, unified_diff


@pytest.mark.parametrize(("model", "name"), texts.cases(), ids=[f"{m}-{n}" for m, n in texts.cases()])
def test_stage_text_is_the_golden_one(model, name):
    path = texts.expected_path(model, name)
    now = texts.text(model, name)
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `{texts.UPDATE_COMMAND}` and review it", pytrace=False)
    expected = path.read_text(encoding="utf-8")
    if now != expected:
        diff = unified_diff(expected, now, f"{model}/{name}.txt")
        pytest.fail(
            f"{model}: the {name} text changed; if that is intended, run `{texts.UPDATE_COMMAND}` "
            f"and review the diff:\n{diff}",
            pytrace=False,
        )


def test_no_expected_file_is_left_from_a_removed_model_or_stage():
    assert not stale_files(), f"run `{texts.UPDATE_COMMAND}` to delete them"


def test_every_model_has_an_optimizer_and_runs_every_stage():
    assert texts.model_names() == sorted(texts.OPTIMIZERS)
    assert {n.partition(".")[0] for n in texts.file_names()} >= set(texts.STAGE_NAMES)


@pytest.mark.parametrize("model", texts.model_names())
def test_the_reference_trains_the_simplified_step_the_golden_text_shows(model):
    """Session's NumPy training step (build_train_graph) is the simplify stage's train program,
    so simplify.txt is the reference's training graph too."""
    work = texts.compiled(model, "compute")
    step = build_train_graph(work.graph, None, texts.OPTIMIZERS[model]())
    assert str(step) == str(work.graphs["train"])


def test_the_update_command_writes_every_file_and_deletes_stale_ones(tmp_path, monkeypatch, capsys):
    from .__main__ import main

    monkeypatch.setattr(texts, "EXPECTED", tmp_path / "expected")
    stale = tmp_path / "expected" / "gone_model" / "parse.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("old\n")
    assert main([]) == 1  # every file missing, one stale: nothing written
    assert not texts.expected_path("mlp_adam", "parse").exists() and stale.exists()
    assert main(["--update"]) == 0
    assert not stale.parent.exists()
    assert sorted(tmp_path.rglob("*.txt")) == sorted(texts.expected_path(m, n) for m, n in texts.cases())
    plan = texts.expected_path("mlp_adam", "plan.compute")
    plan.write_text(plan.read_text().replace("peak", "PEAK"))
    capsys.readouterr()
    assert main(["--diff"]) == 1
    out = capsys.readouterr().out
    assert "--- expected/mlp_adam/plan.compute.txt" in out and "\n+peak temporaries:" in out
    assert main(["--update"]) == 0 and capsys.readouterr().out == "wrote expected/mlp_adam/plan.compute.txt\n"
    assert main([]) == 0 and capsys.readouterr().out == "golden files up to date\n"


@pytest.mark.parametrize("stage", [s for s in texts.STAGE_NAMES if s != "codegen"])
def test_dlc_compile_emit_prints_the_golden_text(stage, tmp_path, monkeypatch, capsys):
    """The golden files are what `dlc compile --train --emit STAGE` prints (Adam's defaults;
    the learning rate is an input of the step, so it is in no text; codegen's file keeps a
    few of the kernels it prints)."""
    from dlc import cli

    (tmp_path / "mlp_adam.dl").write_text((texts.MODELS / "mlp_adam.dl").read_text())
    monkeypatch.chdir(tmp_path)  # where a compiled folder may be written
    argv = ["compile", "mlp_adam.dl", "--train", "--optimizer", "adam", "--batch-size", str(texts.BATCH)]
    assert cli.main([*argv, "--emit", stage]) == 0
    name = f"{stage}.compute" if stage in texts.TARGET_STAGES else stage
    assert capsys.readouterr().out == texts.expected_path("mlp_adam", name).read_text(encoding="utf-8")
