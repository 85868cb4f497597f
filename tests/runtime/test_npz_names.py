"""Weights under any name: np.savez takes its arrays as keywords, so params named `file` or
`allow_pickle` (and `dlc compile`'s params.npz of such a model) could not be written."""

from __future__ import annotations

import numpy as np

import dlc
from dlc.compiler.emit import write_artifact
from dlc.runtime.npzfile import NpzReader, write_npz

MODEL = """
input x: [B, 2]
param file: [2, 3] = glorot
param allow_pickle: [3] = ones
y = x @ file + allow_pickle
"""


def test_write_npz_holds_any_name_and_np_load_reads_it(tmp_path):
    arrays = {"file": np.arange(6, dtype=np.float32).reshape(2, 3), "allow_pickle": np.ones(3, np.int32), "a/b": 1.5}
    write_npz(tmp_path / "w.npz", arrays)
    with np.load(tmp_path / "w.npz", allow_pickle=False) as f:
        assert sorted(f.files) == sorted(arrays)
        for name, value in arrays.items():
            np.testing.assert_array_equal(f[name], value)
            assert f[name].dtype == np.asarray(value).dtype
    with NpzReader(tmp_path / "w.npz") as r:
        np.testing.assert_array_equal(r["file"], arrays["file"])


def test_a_model_with_such_params_saves_loads_and_compiles(tmp_path):
    sess = dlc.Session(MODEL, backend="numpy", seed=0)
    sess.save(tmp_path / "w.npz")
    other = dlc.Session(MODEL, backend="numpy", seed=1)
    other.load(tmp_path / "w.npz")
    for name in ("file", "allow_pickle"):
        np.testing.assert_array_equal(other.params[name], sess.params[name])
    out = write_artifact(dlc.compile(MODEL), tmp_path / "m.dlc")
    with np.load(out / "params.npz", allow_pickle=False) as f:
        assert sorted(f.files) == ["allow_pickle", "file"]
