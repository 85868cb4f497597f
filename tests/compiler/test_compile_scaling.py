"""Compile work grows linearly with the model (benchmarks/bench_compile.py times it): work is
counted here, never timed."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from dlc.compiler import fusion
from dlc.compiler.pipeline import Options, Work, run_stages
from dlc.compiler.plan import first_fit
from dlc.runtime.optimizers import SGD

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_compile import chained_source  # noqa: E402


def test_fusion_rounds_do_not_grow_with_the_model(monkeypatch):
    # Compile work counted, not timed: the rounds of cutting over-full kernels (each a
    # fusion of the whole program) stay few however long the chain of products.
    calls = []
    real = fusion._fuse
    monkeypatch.setattr(fusion, "_fuse", lambda *a, **k: calls.append(1) or real(*a, **k))
    rounds = {}
    for n in (20, 160):
        calls.clear()
        run_stages(Work(chained_source(n), "chain.dl"), Options(optimizer=SGD(0.1), verify=False), stop="fuse")
        rounds[n] = len(calls)
    assert rounds[160] == rounds[20] <= 8, rounds


def _first_fit_by_definition(order, live):
    """The first slot none of whose tensors is live at the same time (quadratic)."""
    members: list[list[int]] = []
    for t in order:
        lo, hi = live[t]
        free = [s for s, ts in enumerate(members) if all(hi < live[o][0] or live[o][1] < lo for o in ts)]
        if free:
            members[free[0]].append(t)
        else:
            members.append([t])
    return members


def test_the_plans_slot_search_is_first_fit():
    rng = random.Random(0)
    for _ in range(500):
        n, end = rng.randint(0, 30), rng.randint(1, 20)
        live, size = {}, {}
        for t in range(n):
            lo = rng.randint(0, end)
            live[t], size[t] = (lo, rng.randint(lo, end + 1)), rng.choice([1, 2, 3, 8])
        order = sorted(live, key=lambda t: (-size[t], live[t][0], t))
        assert first_fit(order, live, size.__getitem__) == _first_fit_by_definition(order, live), live


def _calls(n: int) -> int:
    """Python function calls compiling the chain of n products (eval and train programs)."""
    import cProfile
    import pstats

    from bench_compile import compile_stages

    prof = cProfile.Profile()
    prof.runcall(compile_stages, n)
    return pstats.Stats(prof).total_calls


def test_compile_work_grows_linearly_with_the_chain():
    _calls(5)  # the grammar and the op tables load once
    small, large = _calls(50), _calls(200)
    # 4 times the model: about 4 times the calls (n^2 passes made it 10 times and more)
    assert large / small < 4.6, (small, large)
