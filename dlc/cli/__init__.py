"""The `dlc` command line (SPEC section 2): check, compile, train, eval, generate, plot-model,
import, export, info. Here: the parser, the dispatch to one module per command and the map
from exceptions to exit codes.

A command's module (`dlc/cli/COMMAND.py`: DESCRIPTION, EPILOG, add_arguments(parser),
run(args)) is imported only when that command runs, so `dlc --help` and `dlc check` import
no GL; `options.py` declares the flags several commands share; `models.py` opens the model
and session a command runs on. Errors in a model or in data print the located message and
exit 1 without a traceback (`--debug` shows one); usage errors exit 2 (argparse); an
interrupt exits 130.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import DlcError
from ..optional import require
from ..runtime.errors import UsageError
from ..runtime.version import __version__
from ..stdout_guard import guard_stdout

EXIT_INTERRUPTED = 130
__all__ = ["COMMANDS", "main"]


class Command(NamedTuple):
    module: str  # dlc.cli.MODULE
    help: str  # its line in `dlc --help`


COMMANDS = {
    "check": Command("check", "parse and shape-check a model; list its inputs, params, tensors and losses"),
    "compile": Command("compile", "compile a model to an artifact folder (GLSL kernels, plan, params)"),
    "train": Command("train", "train a model's params on a data file"),
    "eval": Command("eval", "evaluate named tensors over a data file"),
    "generate": Command("generate", "sample text from a language model trained on a text file"),
    "plot-model": Command("plot_model", "draw the model's graph to an SVG, PNG or PDF (needs Graphviz)"),
    "import": Command("import_onnx", "import an ONNX model as a .dl model and a weights file"),
    "export": Command("export", "export a model to run and train in a browser (WebGL2)"),
    "info": Command("info", "show the OpenGL context dlc finds and the backend it would use"),
}


def command_module(name: str):
    """The module of command `name` (imported now: its own imports come with it)."""
    return require(f"dlc.cli.{COMMANDS[name].module}")


# -- argument parsing --------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags (`--epoch` is not `--epochs`): a typo must not pass for a flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=32)


# What PyTorch, Keras and other CLIs call a flag -> dlc's name for it.
FLAG_ALIASES = {
    "--learning-rate": "--lr",
    "--learningrate": "--lr",
    "--epoch": "--epochs",
    "--num-epochs": "--epochs",
    "--batch": "--batch-size",
    "--bs": "--batch-size",
    "--step": "--steps",
    "--max-steps": "--steps",
    "--optim": "--optimizer",
    "--opt": "--optimizer",
    "--validation": "--val",
    "--validation-data": "--val",
    "--val-data": "--val",
    "--output": "--save",
    "--out": "--save",
    "--early-stopping": "--early-stop",
    "--patience": "--early-stop",
    "--metrics": "--metric",
    "--weights": "--init",
}


def suggest_flag(word: str, options: Sequence[str]) -> str:
    """' (did you mean --lr?)' for an unknown flag, from the command's own flags: the same
    with '-' for '_', a common name from other tools, a flag it abbreviates, a close spelling."""
    flag = word.split("=", 1)[0]
    norm = flag.replace("_", "-").lower()
    candidates = [norm, FLAG_ALIASES.get(norm, "")]
    candidates += [o for o in options if o.startswith(norm) and len(norm) > 2]
    candidates += difflib.get_close_matches(norm, options, n=1, cutoff=0.6)
    for c in candidates:
        if c in options and c != flag:
            return f" (did you mean {c}?)"
    return ""


def _chosen(argv: Sequence[str]) -> str | None:
    """The command named in `argv` (the first word that is no flag: dlc's own flags take no
    value), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: every command listed, `command`'s own flags declared (its module imported);
    None: every command's, importing them all."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show a traceback with any error"
    )
    p = _Parser(
        prog="dlc",
        formatter_class=_Formatter,
        description="dlc compiles models written in the .dl language to OpenGL shaders and runs "
        "them:\nevaluation, gradients and training.",
        epilog="examples:\n"
        "  dlc check samples/mlp_digits.dl\n"
        "  dlc train samples/quadratic.dl --data samples/data/quadratic.npz --steps 200\n"
        "  dlc eval samples/quadratic.dl --data samples/data/quadratic.npz --fetch y,cost "
        "--weights quadratic.weights.npz\n"
        "  dlc compile samples/mlp_digits.dl --emit ir\n"
        "  dlc plot-model samples/mlp_digits.dl -o mlp.svg --kernels\n\n"
        "run 'dlc COMMAND --help' for a command's options.",
    )
    p.add_argument("--version", action="version", version=f"dlc {__version__}")
    p.add_argument("--debug", action="store_true", default=False, help="show a traceback with any error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        if command is not None and name != command:
            sub.add_parser(name, parents=[common], help=cmd.help)  # listed; its flags unneeded
            continue
        module = command_module(name)
        c = sub.add_parser(
            name,
            parents=[common],
            formatter_class=_Formatter,
            help=cmd.help,
            description=module.DESCRIPTION,
            epilog=module.EPILOG,
        )
        module.add_arguments(c)
        c.set_defaults(func=module.run)
    return p


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, but an unknown flag is reported by the command it was given to,
    with the flag it looks like."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = _subparsers(parser).get(getattr(args, "command", None), parser)
        flags = [w for w in extra if w.startswith("-")]
        word = flags[0] if flags else extra[0]
        options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
        hint = suggest_flag(word, options) if word.startswith("-") else ""
        sub.error(f"unrecognized argument{'s' if len(extra) > 1 else ''}: {' '.join(extra)}{hint}")
    return args


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# -- running a command -------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_chosen(words) or "")
    args = parse_args(parser, words)
    args.argv = words  # to say how to go on with a run
    if not args.debug:
        # NumPy's overflow and invalid-value warnings while running a model are noise here:
        # a NaN loss is reported as divergence, and fetched values are printed as they are.
        warnings.filterwarnings("ignore", category=RuntimeWarning)
    debug = require("dlc.debug") if getattr(args, "debug_kernels", False) else None
    if debug is not None:
        debug.enable()
    plain_stdout = sys.stdout
    guard_stdout()  # `dlc ... | head` stops the printing, never the work
    try:
        return args.func(args)
    except BrokenPipeError:  # stderr's reader gone too: nothing left to say it to
        return 0
    except UsageError as e:
        if args.debug:
            traceback.print_exc()
        parser.exit(2, f"dlc {args.command}: error: {e}\n")
    except DlcError as e:
        if args.debug:
            traceback.print_exc()
        text = str(e)
        print(text if text.startswith(_located_prefix(e)) else f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug in dlc: say so briefly, the traceback is one flag away
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"dlc: internal error: {type(e).__name__}: {e}\n(run again with --debug for the traceback)",
                file=sys.stderr,
            )
        return 1
    finally:
        if debug is not None:
            _print_profile(debug.summary())
        sys.stdout = plain_stdout
    return 0  # unreachable: parser.exit raises


def _print_profile(text: str) -> None:
    try:
        print("dlc debug: kernel profile\n" + text, file=sys.stderr)
    except BrokenPipeError:
        pass


def _located_prefix(e: DlcError) -> str:
    """CompileErrors already print as 'file:line:col: error: ...'."""
    loc = getattr(e, "loc", None)
    return str(loc) if loc is not None else "\0"


def __getattr__(name: str) -> Any:
    # `cli.STAGES`: the compiler's stage names (dlc.compiler.pipeline.STAGE_NAMES), which
    # `dlc compile --emit` takes; importing the compiler only when asked.
    if name == "STAGES":
        return require("dlc.cli.compile").STAGES
    raise AttributeError(f"module 'dlc.cli' has no attribute {name!r}")
