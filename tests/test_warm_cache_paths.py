"""A new process whose compile cache holds a model it trained before (the README's `dlc train`
then `dlc generate`, or a notebook restarted) takes the warm path, which imports no op
registry; anything that path still has to build and store (the eval form a generation needs,
when only the training graphs were cached) must compute its element types all the same
(it raised "a graph's element types need the op registry" here)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

SIZES = {"BLOCK": 16, "L": 1, "H": 2, "D": 4, "C": 8}  # samples/char_gpt.dl, shrunk


def tiny_gpt() -> str:
    text = (ROOT / "samples" / "char_gpt.dl").read_text()
    for name, value in SIZES.items():
        text, n = re.subn(rf"^const {name} = \d+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    return text


TRAIN = """
import numpy as np, dlc
sess = dlc.Session(dlc.compile(open("model.dl").read()), backend=sys.argv[1], seed=0)
rng = np.random.default_rng(0)
ids = rng.integers(0, 76, (4, 17)).astype(np.int32)
sess.train({"tokens": ids[:, :-1], "targets": ids[:, 1:]}, optimizer=dlc.Adam(1e-2), batch_size=4, steps=2)
print("trained")
"""

GENERATE = """
import dlc
sess = dlc.Session(dlc.compile(open("model.dl").read()), backend=sys.argv[1], seed=0)
print("ids", sess.generate([1, 2], 5, block=16, seed=3))
"""


def _run(code: str, backend: str, cwd: pathlib.Path, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code, backend], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("backend", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_generate_in_a_new_process_after_training_with_a_warm_cache(tmp_path, backend):
    (tmp_path / "model.dl").write_text(tiny_gpt())
    env = {**os.environ, "DLC_CACHE_DIR": str(tmp_path / "cache"), "DLC_COMPILE_CACHE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    assert "trained" in _run(TRAIN, backend, tmp_path, env)
    warm = _run(GENERATE, backend, tmp_path, env)
    cold = _run(GENERATE, backend, tmp_path, {**env, "DLC_COMPILE_CACHE": "0"})
    assert warm.startswith("ids [") and warm == cold  # the same ids with and without the cache
