"""The command line's shape: one module per command, imported only when it runs; each flag
declared once; no function-level imports in the CLI and the session; STAGES is the compiler's."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dlc import cli

cli_main = cli

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "dlc" / "cli"


def test_every_command_is_a_module_with_its_parts():
    assert set(cli.COMMANDS) == {
        "check",
        "compile",
        "train",
        "eval",
        "generate",
        "plot-model",
        "import",
        "export",
        "info",
    }
    for name in cli.COMMANDS:
        module = cli_main.command_module(name)
        for part in ("DESCRIPTION", "EPILOG", "add_arguments", "run"):
            assert hasattr(module, part), (name, part)
    parser = cli_main.build_parser()  # every command's flags at once
    assert set(cli_main._subparsers(parser)) == set(cli.COMMANDS)


def test_stages_are_the_compilers():
    from dlc.compiler.pipeline import STAGE_NAMES

    assert cli.STAGES is STAGE_NAMES
    assert cli_main.command_module("compile").EMIT_CHOICES[: len(STAGE_NAMES)] == STAGE_NAMES


def _add_argument_flags(path: Path) -> list[str]:
    """The flags `path` declares (the string arguments of its add_argument calls)."""
    flags = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags += [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
    return flags


def test_no_flag_is_declared_twice():
    declared = Counter()
    for path in sorted(CLI.glob("*.py")):
        declared.update(_add_argument_flags(path))
    twice = {flag: n for flag, n in declared.items() if n > 1 and flag != "--debug"}  # main's and each command's
    assert not twice, twice


@pytest.mark.parametrize("path", [ROOT / "dlc" / "session.py", *sorted(CLI.glob("*.py"))], ids=lambda p: p.name)
def test_no_function_level_imports(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # top level: the module's statements and its `if TYPE_CHECKING:` block (never run)
    typing_only = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    top = {id(n) for n in [*tree.body, *(s for block in typing_only for s in block.body)]}
    inner = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top]
    assert not inner, f"{path.name}: imports inside functions at lines {inner} (use dlc.runtime.optional.require)"


def _modules_after(code: str, tmp_path) -> list[str]:
    probe = code + (
        "\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('dlc.cli.', 'dlc.compiler', 'OpenGL',"
        " 'lark', 'rich', 'dlc.session', 'dlc.runtime.gl')))))\n"
    )
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_import_dlc_cli_and_help_import_no_command(tmp_path):
    assert _modules_after("import dlc.cli", tmp_path) == []
    code = "from dlc.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _modules_after(code, tmp_path) == []


def test_a_command_imports_its_module_only(tmp_path):
    model = tmp_path / "m.dl"
    model.write_text("input x: [B, 3]\nparam W: [3, 2]\ny = x @ W\n", encoding="utf-8")
    got = _modules_after(f"from dlc.cli import main\nmain(['check', {str(model)!r}])", tmp_path)
    commands = {m for m in got if m.startswith("dlc.cli.")} - {"dlc.cli.models", "dlc.cli.options"}
    assert commands == {"dlc.cli.check"}
    assert not {m for m in got if m.startswith(("OpenGL", "dlc.runtime.gl", "rich"))}


def test_python_m_dlc_and_the_entry_point_run_main(dlc_run):
    p = dlc_run("--version")
    assert p.returncode == 0 and p.stdout.startswith("dlc ")
    p = dlc_run("nonsense")
    assert p.returncode == 2 and "invalid choice: 'nonsense'" in p.stderr
