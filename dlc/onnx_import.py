"""`dlc.import_onnx`: the ONNX importer (compiler/importers) with its model as `dlc.compile`
gives it (the compiler layer returns the graph; `dlc.Model` is the API's)."""

from __future__ import annotations

import dataclasses

from dlc.model import Model


def import_onnx(path_or_model, batch: str | int | None = None, freeze=(), trainable=None):
    """Import an ONNX model: `.model .weights .source .inputs .outputs` (README, "Importing
    ONNX models"); `batch` makes the inputs' first dim that symbolic name (or that int);
    `freeze` / `trainable`: globs of params to import as `frozen param` / to keep trainable
    (all others frozen)."""
    from dlc.compiler.importers.onnx_model import import_onnx as import_graph

    imported = import_graph(path_or_model, batch, freeze, trainable)
    return dataclasses.replace(imported, model=Model(imported.model, imported.source, "<imported>"))
