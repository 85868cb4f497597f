"""Where prepared launches keep their memory barrier (runtime/executor.py `_with_barriers`),
on made-up kernels: no GL needed."""

from __future__ import annotations

from types import SimpleNamespace

from dlc.runtime.executor import Executor
from dlc.runtime.launches import Prepared
from dlc.runtime.program import BARRIER_BITS

DISPATCH, BARRIER = object(), object()


def fake(kernels: list[tuple[tuple[int, ...], tuple[int, ...], bool]]) -> SimpleNamespace:
    """kernels: (slots bound, slots written, dispatches?) each; tensor t lives in slot t."""
    launches = []
    for _, _, runs in kernels:
        groups = (1, 1, 1) if runs else (0, 1, 1)
        calls = ((DISPATCH, (1, 1, 1)), (BARRIER, (BARRIER_BITS,))) if runs else ()
        launches.append(Prepared(1, (), calls, groups))
    return SimpleNamespace(
        kernels=[SimpleNamespace(slots=slots, writes=writes) for slots, writes, _ in kernels],
        tensors={t: SimpleNamespace(slot=t) for t in range(16)},
        _launches=launches,
    )


def barriers(ex) -> list[bool]:
    plan = Executor._with_barriers(ex, list(range(len(ex.kernels))))
    return [bool(p.calls) and p.calls[-1][0] is BARRIER for p in plan]


def test_a_read_after_write_a_write_after_read_and_the_end_keep_a_barrier():
    ex = fake(
        [
            ((0, 1), (1,), True),  # writes 1
            ((1, 2), (2,), True),  # reads 1: a barrier before it
            ((3, 4), (4,), True),  # independent of the one before: none
            ((5, 1), (5,), True),  # reads 1 (written before the last barrier), writes 5: none
            ((2, 6), (6,), True),  # reads 2, written in this stretch: a barrier before it
            ((7, 0), (0,), True),  # overwrites 0, which nothing since the last barrier read
            ((8, 6), (8,), True),  # reads 6, written in this stretch
        ]
    )
    assert barriers(ex) == [True, False, False, True, False, True, True]


def test_a_write_after_read_keeps_a_barrier():
    ex = fake([((0, 1), (1,), True), ((2, 3), (0,), True)])  # the second overwrites what the first reads
    assert barriers(ex) == [True, True]


def test_a_launch_without_a_dispatch_does_not_hide_a_needed_barrier():
    ex = fake([((0, 1), (1,), True), ((2, 3), (3,), False), ((1, 4), (4,), True)])
    plan = barriers(ex)
    assert plan[0] is True  # kept on the launch that dispatches, not moved to the empty one
    assert plan[2] is True
