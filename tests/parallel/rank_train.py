"""Run under mpiexec (tests/parallel/test_parallel.py starts it): trains a model data
parallel and writes rank 0's params, or trains in one process when the world is one rank.

    python rank_train.py OUT.npz BACKEND OPTIMIZER STEPS BATCH [FAULT]

FAULT (for the fault tests): "data" (rank 1 trains on other data), "die" (rank 1 exits at
step 3), "hang" (rank 1 sleeps at step 3; the others time out after 3 s); or "resume": every
rank stops at step 8, rank 0 writes a checkpoint, every rank restores it in a new session and
the run goes on to its end.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dlc
from dlc import distributed

MLP = """
input x: [B, 6]
input y: [B, 3]
param W1: [6, 8] = glorot
param b1: [8] = zeros
param W2: [8, 3] = glorot
param b2: [3] = zeros
h = tanh(x @ W1 + b1)
loss cost = softmax_cross_entropy(h @ W2 + b2, y)
"""


def data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((45, 6)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 45)]
    return {"x": x, "y": y}


def main(out, backend, optimizer, steps, batch, fault=""):
    world = distributed.init(timeout_s=3.0) if distributed.launched_by_mpi() else None
    rank = world.rank if world else 0
    sess = dlc.Session(dlc.compile(MLP), backend=backend, seed=3, parallel=world)
    opt = {"sgd": dlc.SGD(0.1), "adam": dlc.Adam(0.01), "adamw": dlc.AdamW(0.01, clip_norm=0.5)}[optimizer]
    feeds = data()
    if fault == "data" and rank == 1:
        feeds["x"] = feeds["x"] + 1.0

    def callback(step, epoch, loss, examples):
        if fault == "resume" and step == 8:
            return False
        if rank == 1 and step == 3 and fault == "die":
            os._exit(3)
        if rank == 1 and step == 3 and fault == "hang":
            time.sleep(600)

    try:
        losses = sess.train(feeds, optimizer=opt, batch_size=int(batch), steps=int(steps), callback=callback)
    except dlc.DlcError as e:
        print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
        world.abort(1)
        sys.exit(1)
    if fault == "resume":
        checkpoint = out + ".ckpt.npz"
        if rank == 0:
            sess.save_checkpoint(checkpoint)
        if world is not None:
            world.comm.Barrier()
        sess = dlc.Session(dlc.compile(MLP), backend=backend, seed=3, parallel=world)
        sess.restore(checkpoint)
        losses = losses + sess.train(feeds, optimizer=opt, batch_size=int(batch), steps=int(steps), resume=True)
    if rank == 0:
        np.savez(out, losses=np.asarray(losses), **sess.params)


if __name__ == "__main__":
    main(*sys.argv[1:])
