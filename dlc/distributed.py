"""Data-parallel training over MPI (mpi4py): one process (rank) per GPU, the same model,
seed and data everywhere.

Every rank runs the same `Session.train` call, so every rank draws the same global batches
(the batch order is fixed by the seed, whatever the number of ranks). A step then splits in
two compiled programs (`compiler.train_graph.build_split_step`):

1. each rank computes the loss and the gradients of its shard of the batch (a contiguous
   run of its rows, sizes differing by at most one);
2. the gradients and the loss, each weighted by the shard's share of the batch, are summed
   over the ranks in one fused buffer (`MPI_Allreduce`), giving the gradients of the whole
   batch's mean loss;
3. each rank applies the same update (the optimizer, clipping and schedule included) to
   its copy of the params and optimizer state, which stay identical on every rank.

So N ranks at batch B train as one process at batch B does, up to float rounding. The
losses of the language are means over the batch, which is what makes the weighting exact.

    world = dlc.distributed.init()           # MPI's world; picks this rank's GL device
    sess = dlc.Session(model, parallel=world)
    sess.train(data, optimizer=dlc.Adam(1e-3), batch_size=64, epochs=5)
    if world.rank == 0:
        sess.save("w.npz")

Run it with `mpiexec -n 2 python train.py` (or `srun`); `dlc train --workers N` starts
`mpiexec` itself. A collective that waits longer than `timeout_s` (a rank died or hung)
stops every rank with an error naming the step; `check_same` at the first step refuses
ranks that disagree on the dlc version, the model, the optimizer or the data.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .runtime.context import egl_device_count
from .runtime.errors import DlcError, RuntimeFailure
from .runtime.optional import require
from .runtime.spec import LR
from .runtime.version import __version__

# Environment variables MPI launchers set for a process's rank among those of its node
# (mpich's hydra, Open MPI, Slurm's srun).
LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
# ... and for the job's size (to know, before importing MPI, whether this is a parallel run).
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMIX_SIZE")
DEFAULT_TIMEOUT_S = 120.0


def launched_by_mpi() -> bool:
    """Whether this process is one of several that an MPI launcher started."""
    for var in SIZE_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def _mpi():
    return require("mpi4py.MPI", "mpi", "data-parallel training", "mpi4py and an MPI library (mpi4py and mpich)")


@dataclass
class World:
    """The ranks training together: `rank` of `size`, over an mpi4py communicator."""

    comm: Any
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: int | None = None  # the EGL device this rank's GL context uses (None: the default)
    steps: int = field(default=0, init=False)  # all-reduces done (named in errors)
    # A rank that wants the run to stop (Ctrl-C, SIGTERM) says so in its next all-reduce, so
    # every rank stops after the same step: `stop_requested` asks this rank, `stopping` is
    # whether any rank asked.
    stop_requested: Callable[[], bool] | None = None
    stopping: bool = field(default=False, init=False)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def shard(self, n: int) -> tuple[int, int]:
        """The rows [start, stop) of a batch of n this rank takes: contiguous runs whose sizes
        differ by at most one, in rank order."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    def allreduce(self, buffer: np.ndarray, what: str) -> np.ndarray:
        """`buffer` summed over the ranks, in place; waits at most `timeout_s`, then stops
        this rank with an error (MPI cannot cancel a collective: `abort` ends the job)."""
        MPI = _mpi()
        request = self.comm.Iallreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)
        self._wait(request, what)
        self.steps += 1
        return buffer

    def _wait(self, request, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        pause = 1e-5
        while not request.Test():
            if time.monotonic() > deadline:
                raise RuntimeFailure(
                    f"rank {self.rank} of {self.size}: {what} waited more than {self.timeout_s:g} s for the "
                    "other ranks (one died, hung or runs another program); stopping"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def check_same(self, facts: Mapping[str, str]) -> None:
        """Refuse to train unless every rank has the same `facts` (name -> text); the error
        names the first rank and the fact that differ from rank 0's."""
        mine = {k: str(v) for k, v in facts.items()}
        digests = np.empty((self.size, 32), dtype=np.uint8)
        request = self.comm.Iallgather(np.frombuffer(_digest(mine), dtype=np.uint8), digests)
        self._wait(request, "the start-up check")
        if (digests == digests[0]).all():
            return
        everyone = self.comm.allgather(mine)  # the digests differ: find what
        for r, theirs in enumerate(everyone):
            for key in everyone[0]:
                if theirs.get(key) != everyone[0][key]:
                    raise DlcError(
                        f"rank {r} differs from rank 0 in its {key}: {theirs.get(key)!r} against "
                        f"{everyone[0][key]!r}; every rank must run the same dlc, model, optimizer and data"
                    )

    def abort(self, code: int = 1) -> None:
        """End every rank of the job (after an error that leaves the others waiting)."""
        self.comm.Abort(code)


def _digest(facts: Mapping[str, str]) -> bytes:
    h = hashlib.sha256()
    for k in sorted(facts):
        h.update(f"{k}={facts[k]}\0".encode())
    return h.digest()


def data_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """A hash of training data (names, dtypes, shapes and bytes)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}\0".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def local_rank() -> int:
    for var in LOCAL_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def init(comm=None, devices: Sequence[int] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> World:
    """The world of ranks (MPI's COMM_WORLD unless `comm`), with this rank's GL device
    chosen before any context is made: `devices[local rank % len(devices)]` when given, else
    local rank % the node's EGL device count (a node of one GPU shares it), unless
    DLC_EGL_DEVICE already names one."""
    MPI = _mpi()
    world = World(comm if comm is not None else MPI.COMM_WORLD, timeout_s=timeout_s)
    if "DLC_EGL_DEVICE" not in os.environ:
        if devices:
            world.device = int(devices[local_rank() % len(devices)])
        else:
            count = egl_device_count()
            world.device = local_rank() % count if count > 1 else None
        if world.device is not None:
            os.environ["DLC_EGL_DEVICE"] = str(world.device)
    return world


class ParallelStep:
    """A Session's data-parallel training step for one (loss, optimizer): the gradient and
    update programs, and the step that runs them around the all-reduce."""

    def __init__(self, session, loss: str | None, optimizer) -> None:
        self.session, self.world, self.optimizer = session, session.parallel, optimizer
        # the compiler on first use: a session over an artifact imports none of it
        train_graph = require("dlc.compiler.train_graph")
        grad_name = require("dlc.compiler.grad_names").grad_name
        self.grads, self.update = train_graph.build_split_step(session.model.graph, loss, optimizer, session.freeze)
        self.trained = list(self.update.params)
        self.loss_node = self.grads.names[self.grads.losses[0]]
        self.roots = [self.loss_node, *(self.grads.names[grad_name(p)] for p in self.trained)]
        self.needed = require("dlc.compiler.ir").leaf_inputs(self.grads, self.roots)
        self.shapes = [tuple(self.update.shape(p)) for p in self.trained]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.grad_inputs = [grad_name(p) for p in self.trained]
        # [loss, gradients..., stop], reused every step (the update reads views of it)
        self.fused = np.zeros(2 + sum(self.sizes), dtype=np.float32)
        self.checked = False

    def check(self, arrays: Mapping[str, np.ndarray], batch_size: int | None) -> None:
        """At the first step: every rank runs the same dlc, model, optimizer and data."""
        if self.checked:
            return
        self.world.check_same(
            {
                "dlc version": __version__,
                "model": hashlib.sha256(str(self.session.model.graph).encode()).hexdigest(),
                "optimizer": repr(self.optimizer),
                "batch size": repr(batch_size),
                "seed": repr(self.session.seed),
                "data": data_digest(arrays),
            }
        )
        self.checked = True

    def __call__(self, batch: dict[str, np.ndarray], bdims: dict[str, int], dim: str | None) -> float:
        backend = self.session.backend
        n = bdims[dim] if dim is not None else 0
        start, stop = self.world.shard(n) if dim is not None else (0, 0)
        # [loss, gradients..., stop]: the loss and gradients weighted by the shard's share, and
        # whether this rank wants to stop (summed: any rank stops all after this step).
        fused = self.fused
        fused[:] = 0.0
        fused[-1] = 1.0 if self.world.stop_requested and self.world.stop_requested() else 0.0
        if dim is None:  # no batch axis: every rank computes the same whole step
            values, weight = backend.run(self.grads, self.roots, batch, bdims), 1.0 / self.world.size
        elif stop > start:
            shard = {k: (v[start:stop] if k in self.needed else v) for k, v in batch.items()}
            values = backend.run(self.grads, self.roots, shard, {**bdims, dim: stop - start})
            weight = (stop - start) / n
        else:  # a batch smaller than the ranks: this one has no rows
            values, weight = None, 0.0
        if values is not None:
            fused[0] = float(values[0]) * weight
            offset = 1
            for v, size in zip(values[1:], self.sizes):
                fused[offset : offset + size] = np.asarray(v, dtype=np.float32).ravel() * weight
                offset += size
        self.world.allreduce(fused, f"the gradients of step {self.world.steps + 1}")
        self.world.stopping = self.world.stopping or fused[-1] > 0
        feeds, offset = {LR: np.asarray(self.optimizer.lr, dtype=np.float32)}, 1
        for name, shape, size in zip(self.grad_inputs, self.shapes, self.sizes):
            feeds[name] = fused[offset : offset + size].reshape(shape)
            offset += size
        backend.step(self.update, [], feeds, {})
        return float(fused[0])
