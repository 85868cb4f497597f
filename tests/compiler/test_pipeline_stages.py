"""The compiler as named stages: their order, verification between them, simplify once per
program. What each stage prints is in tests/golden (the whole text of every stage)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dlc
from dlc import cli
from dlc.compiler import pipeline, verify
from dlc.compiler.ir import Graph
from dlc.compiler.pipeline import STAGE_NAMES, Options, Work, run_stages

MLP = Path(__file__).resolve().parents[2] / "samples" / "mlp_digits.dl"


def _work(train: bool = True, **kw) -> Work:
    opts = Options(optimizer=dlc.Adam(0.01) if train else None, batch_size=32, **kw)
    return run_stages(Work(MLP.read_text(), str(MLP)), opts)


def test_stage_names_in_order_and_the_cli_lists_the_same():
    assert STAGE_NAMES == ("parse", "build", "verify", "autodiff", "optimizer", "simplify", "fuse", "plan", "codegen")
    assert cli.STAGES == STAGE_NAMES


def test_the_train_step_is_built_from_the_unsimplified_model_and_simplified_once():
    opts = Options(optimizer=dlc.Adam(0.01), batch_size=32)
    w = run_stages(Work(MLP.read_text(), str(MLP)), opts, stop="optimizer")
    step = w.graphs["train"]
    assert step.nodes[: len(w.graph.nodes)] == w.graph.nodes  # the model as built, then grads
    run_stages(w, opts, start="simplify")
    assert str(w.graphs["train"]) == str(pipeline.simplify(step))
    assert len(w.graphs["train"].nodes) < len(step.nodes)
    assert set(w.programs) == {"eval", "train", "outputs"}


def test_simplify_runs_once_per_program(monkeypatch):
    calls: list[Graph] = []
    real = pipeline.simplify

    def counted(g, *a, **k):
        calls.append(g)
        return real(g, *a, **k)

    monkeypatch.setattr(pipeline, "simplify", counted)
    w = _work(train=True)
    assert len(calls) == 2 == len(w.programs) - 1  # eval and train, once each (outputs is fused from eval's)
    calls.clear()
    _work(train=False)
    assert len(calls) == 1
    calls.clear()
    from dlc.compiler.emit import programs

    programs(dlc.compile(MLP), train_loss=None, optimizer=dlc.SGD(0.1))
    assert len(calls) == 2


def test_verify_runs_between_stages_when_on(monkeypatch):
    checked: list[int] = []
    real = pipeline.check_graph
    monkeypatch.setattr(pipeline, "check_graph", lambda g: (checked.append(len(g.nodes)), real(g)))
    _work(verify=False)
    off = len(checked)  # the verify stage itself checks the model once
    checked.clear()
    _work(verify=True)
    assert off == 1 and len(checked) > 4  # build, verify, autodiff, optimizer, simplify x2


def test_a_stage_that_breaks_the_ir_is_caught_after_it(monkeypatch):
    from dlc.compiler import train_graph

    real = train_graph.add_optimizer

    def broken(*a):
        g = real(*a)
        return Graph(g.nodes, g.names, g.inputs, g.params, g.states, ("nope",), g.updates)

    monkeypatch.setattr(train_graph, "add_optimizer", broken)
    with pytest.raises(verify.IRError, match="loss 'nope'"):
        _work(verify=True)


def test_unknown_stage_is_refused_naming_the_stages():
    with pytest.raises(ValueError, match="parse, build, verify, autodiff"):
        run_stages(Work(MLP.read_text(), str(MLP)), Options(), stop="lower")
