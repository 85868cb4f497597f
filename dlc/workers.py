"""`dlc train --workers N` and `dlc train` under an MPI launcher: the command line's side of
data-parallel training (dlc/distributed.py holds the training itself).

`--workers N` on one machine starts `mpiexec -n N` over the same command (without
`--workers`); a `dlc train` that an MPI launcher started (`mpiexec`, `srun`) joins its world:
rank 0 prints, validates, checkpoints and saves, the other ranks train silently. Its flags are
declared with the other shared ones, in dlc/cli/options.py.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from . import distributed
from .runtime.errors import UsageError


def launch(args: argparse.Namespace) -> int | None:
    """With --workers N > 1 outside an MPI job: run the command again under `mpiexec -n N`
    and return its exit code; else None (train here)."""
    if not args.workers or args.workers == 1 or distributed.launched_by_mpi():
        return None
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise UsageError("--workers needs mpiexec on the PATH: pip install 'dlc[mpi]' (mpi4py and mpich)")
    argv = _without_workers(getattr(args, "argv", None) or [])
    return subprocess.call([mpiexec, "-n", str(args.workers), sys.executable, "-m", "dlc", *argv])


def _without_workers(argv: list[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--workers":
            skip = True
        elif not word.startswith("--workers="):
            out.append(word)
    return out


def world_for(args: argparse.Namespace):
    """The data-parallel world when an MPI launcher started this process with others, else None."""
    if not distributed.launched_by_mpi():
        if args.devices:
            raise UsageError("--devices picks the ranks' devices: it needs --workers N or an MPI launcher")
        return None
    devices = None
    if args.devices:
        try:
            devices = [int(d) for d in args.devices.split(",")]
        except ValueError:
            raise UsageError(f"--devices {args.devices}: give device numbers separated by commas, e.g. 0,1") from None
    if args.rank_timeout <= 0:
        raise UsageError(f"--rank-timeout must be more than 0 seconds, not {args.rank_timeout}")
    return distributed.init(devices=devices, timeout_s=args.rank_timeout)
