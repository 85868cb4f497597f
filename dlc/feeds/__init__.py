"""Feeds checked against a model's inputs; they live in `dlc.runtime.feeds`."""

from dlc.runtime.feeds import _suggest, as_element_type, bind_dims, check_missing, ignore_unknown, prepare

__all__ = ["_suggest", "as_element_type", "bind_dims", "check_missing", "ignore_unknown", "prepare"]
