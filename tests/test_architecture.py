"""ARCHITECTURE.md stays honest: its stages are the pipeline's, its folders pyproject's packages."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

from dlc.compiler.pipeline import STAGE_NAMES

ROOT = Path(__file__).resolve().parents[1]


def section(title: str) -> str:
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    found = re.search(rf"^## {re.escape(title)}[^\n]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"ARCHITECTURE.md has no '## {title}' section"
    return found.group(1)


def installed_folders() -> dict[str, str]:
    """Each package pyproject installs -> the folder it comes from (through package-dir)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    package_dir = tool["package-dir"]
    out = {}
    for package in tool["packages"]:
        base = max((p for p in package_dir if package == p or package.startswith(p + ".")), key=len)
        rest = package[len(base) :].lstrip(".").replace(".", "/")
        out[package] = "/".join(x for x in (package_dir[base], rest) if x) + "/"
    return out


def test_the_stages_are_the_pipelines():
    listed = re.findall(r"^\d+\. `(\w+)`", section("Stages"), re.M)
    assert tuple(listed) == STAGE_NAMES


def test_the_folders_are_the_installed_packages():
    rows = dict(
        (module, folder) for folder, module in re.findall(r"^\| `([\w/]+)` \| `([\w.]+)` \|$", section("Folders"), re.M)
    )
    assert rows == installed_folders()


def test_every_package_folder_is_installed():
    # a folder of modules that pyproject forgets would be missing from a wheel
    folders = set(installed_folders().values())
    for top in ("dlc", "compiler", "runtime", "grammar"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.parent.relative_to(ROOT).as_posix() + "/" in folders, init
