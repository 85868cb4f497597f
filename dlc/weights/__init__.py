"""Weights files (.npz) and atomic writes; they live in `dlc.runtime.weights`."""

from dlc.runtime.weights import SaveFailed, checked_params, load_npz, save_npz, save_or_rescue, write_atomic

__all__ = ["SaveFailed", "checked_params", "load_npz", "save_npz", "save_or_rescue", "write_atomic"]
