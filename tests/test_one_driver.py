"""One driver: Session is the only place that runs a train loop; the other drivers are gone;
the seeds' unrolling is a compiler pass (checked against evaluating each example alone)."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import dlc
from dlc.compiler.reference import evaluate
from dlc.compiler.unroll import COST, COST_SUM, cost_as_loss, unroll

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("dlc", "compiler", "runtime")  # the source folders of dlc, dlc.compiler, dlc.runtime
SESSION = pathlib.Path("dlc/session.py")


def sources():
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT), ast.parse(path.read_text(encoding="utf-8"))


def calls(tree: ast.AST):
    """(callee name, receiver text or None) of every call in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                yield f.id, None
            elif isinstance(f, ast.Attribute):
                yield f.attr, ast.unparse(f.value)


def test_only_the_session_runs_a_train_loop():
    loops, state, steps = [], [], []
    for path, tree in sources():
        for name, receiver in calls(tree):
            if name in ("train_loop", "_deferred_loop") and path != pathlib.Path("runtime/training.py"):
                loops.append(str(path))
            if name == "_init_state" and path != SESSION:
                state.append(str(path))
            if name in ("step", "step_into") and receiver and "backend" in receiver and path != SESSION:
                steps.append(f"{path}: {receiver}.{name}")
    assert loops == [str(SESSION)], loops  # one call: Session.train
    assert state == [], state
    # dlc/deferred.py queues the Session's steps into a GPU buffer for it; dlc/distributed.py
    # runs the Session's data-parallel step (its gradients, the all-reduce, its update);
    # dlc/generate.py's KV cache runs its decode graphs (no loss, no gradient) through `step`
    # because that is what applies a graph's state updates: the cache's rows and its
    # hoisted constants
    assert steps == [
        "dlc/deferred.py: self.backend.step_into",
        "dlc/distributed.py: backend.step",
        "dlc/generate.py: self.backend.step",
        "dlc/generate.py: self.backend.step",
    ], steps


def test_the_other_drivers_are_gone():
    from dlc import cli, seeds
    from dlc.runtime.artifact import runner as artifact

    assert not hasattr(artifact.Runner, "train") and not hasattr(artifact.Runner, "eval")
    assert not hasattr(cli, "Target") and not hasattr(cli, "open_target")
    for name in ("_unrolled", "_batched", "seeds_style"):
        assert not hasattr(seeds, name), name
    # what the seeds' style trains with: the Session's one step
    assert "session._train_step(" in pathlib.Path(seeds.__file__).read_text()


def test_the_backend_protocol_is_what_the_backends_implement():
    from dlc.backends.artifact import ArtifactBackend
    from dlc.backends.gl import GLBackend
    from dlc.backends.protocol import Backend
    from dlc.backends.reference import NumpyBackend

    wanted = {"set_leaf", "get_leaf", "drop_leaf", "snapshot", "restore", "run", "step", "memory", "close"}
    declared = {n for n in vars(Backend) if not n.startswith("_")}
    assert wanted <= declared
    for cls in (NumpyBackend, GLBackend, ArtifactBackend):
        missing = wanted - set(dir(cls))
        assert not missing, (cls.__name__, missing)
    assert isinstance(dlc.Session(dlc.compile("input x: [2]\ny = x\n"), backend="numpy").backend, Backend)


MODEL = """input x: [3]
input t: []
param w: [3] = normal(0.5)
param c: [] = 0.1
loss cost = square(sum(x * w) + c - t)
"""


def test_unroll_averages_the_per_example_costs():
    model = dlc.compile(MODEL)
    g = model.graph
    rng = np.random.default_rng(0)
    leaves = {"w": rng.normal(size=3).astype(np.float32), "c": np.float32(0.1)}
    xs = rng.normal(size=(4, 3)).astype(np.float32)
    ts = rng.normal(size=4).astype(np.float32)
    one = [
        float(evaluate(g, [g.names["cost"]], {**leaves, "x": xs[k], "t": ts[k]}, {})[g.names["cost"]]) for k in range(4)
    ]
    u = unroll(g, g.names["cost"], 4)
    assert u.shape("x") == (4, 3) and u.shape("t") == (4,) and list(u.losses) == [COST]
    roots = [u.names[COST], u.names[COST_SUM]]
    got = evaluate(u, roots, {**leaves, "x": xs, "t": ts}, {})
    np.testing.assert_allclose(float(got[roots[0]]), np.mean(one), rtol=1e-6)
    np.testing.assert_allclose(float(got[roots[1]]), np.sum(one), rtol=1e-6)
    with pytest.raises(ValueError, match="batch must be at least 1"):
        unroll(g, g.names["cost"], 0)


def test_cost_as_loss_keeps_the_model_and_names_the_cost():
    g = dlc.compile("input x: [B]\nparam w: [] = 2\nloss cost = mean(x * w)\n").graph
    b = cost_as_loss(g, g.names["cost"])
    assert list(b.losses) == [COST] and b.names[COST] == b.names[COST_SUM] == g.names["cost"]
    assert b.params == g.params
