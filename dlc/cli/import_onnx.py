"""`dlc import MODEL.onnx`: an ONNX model as a .dl model and a weights file."""

from __future__ import annotations

import argparse
import os

from ..onnx_import import import_onnx
from .options import add_freeze, add_output, batch_dim, positive_int

DESCRIPTION = (
    "Import an ONNX model: write MODEL.dl (one statement per ONNX node, named "
    "after its tensors)\nand MODEL.weights.npz (its initializers, as params). "
    'Needs the onnx package:\npip install "dlc[onnx]".'
)
EPILOG = (
    "examples:\n"
    "  dlc import resnet50.onnx -o r50.dl --batch N\n"
    "  dlc eval r50.dl --weights r50.weights.npz --data input.npz --fetch output"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to import")
    add_output(
        c, "MODEL.dl", "the .dl file to write (default: MODEL.dl in the working folder); the weights go beside it"
    )
    c.add_argument(
        "--batch",
        type=batch_dim,
        metavar="NAME|N",
        help="make the inputs' first dim the symbolic dim NAME (any batch size) or N",
    )
    c.add_argument(
        "--max-const-bytes",
        type=positive_int,
        metavar="N",
        help="the most bytes one constant folded at import, and all of them together, may hold (default: 64 MiB)",
    )
    add_freeze(c, "write the params matching this glob (ONNX or .dl name) as `frozen param`; repeatable")
    c.add_argument(
        "--trainable",
        action="append",
        metavar="PATTERN",
        help="keep only the params matching this glob trainable, freezing all others; repeatable",
    )


def run(args: argparse.Namespace) -> int:
    imported = import_onnx(
        args.model,
        batch=args.batch,
        max_const_bytes=args.max_const_bytes,
        freeze=args.freeze or (),
        trainable=args.trainable,
    )
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".dl"  # in the working folder
    weights = imported.save(out)
    print(f"wrote {out} ({len(imported.source.splitlines())} lines) and {weights} ({len(imported.weights)} params)")
    for kind, names in (("input", imported.inputs), ("output", imported.outputs)):
        for onnx_name, dl_name in names.items():
            shape = imported.model.graph.shape(dl_name)
            dtype = "i32" if imported.model.input_dtypes.get(dl_name) == "i32" and kind == "input" else ""
            print(f"  {kind} {onnx_name} -> {dl_name}: {dtype}[{', '.join(map(str, shape))}]")
    return 0
