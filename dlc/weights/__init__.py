"""Weights files (.npz) and atomic writes; they live in `dlc.runtime.weights`."""

from dlc.runtime.weights import checked_params, load_npz, save_npz, write_atomic

__all__ = ["checked_params", "load_npz", "save_npz", "write_atomic"]
