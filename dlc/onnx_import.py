"""`dlc.import_onnx`: the ONNX importer (compiler/importers) with its model as `dlc.compile`
gives it (the compiler layer returns the graph; `dlc.Model` is the API's)."""

from __future__ import annotations

import dataclasses

from dlc.runtime.optional import require

from .model import Model


def import_onnx(
    path_or_model, batch: str | int | None = None, max_const_bytes: int | None = None, freeze=(), trainable=None
):
    """Import an ONNX model: `.model .weights .source .inputs .outputs` (README, "Importing
    ONNX models"); `batch` makes the inputs' first dim that symbolic name (or that int);
    `max_const_bytes` bounds each constant folded at import and all of them together
    (default 64 MiB); `freeze` / `trainable`: globs of params to import as `frozen param` /
    to keep trainable (all others frozen).

    >>> imported = dlc.import_onnx("model.onnx", batch="B")
    >>> sess = dlc.Session(imported.model)
    >>> sess.set_params(imported.weights)
    """

    require("onnx", extra="onnx", why="importing ONNX models")  # the importer's modules import it
    importer = require("dlc.compiler.importers.onnx_model")  # the compiler and onnx: on first use
    imported = importer.import_onnx(path_or_model, batch, max_const_bytes, freeze, trainable)
    return dataclasses.replace(imported, model=Model(imported.model, imported.source, "<imported>"))
