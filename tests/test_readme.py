"""Every code block of README.md runs as written, top to bottom, in one temp working folder
where the repository's `samples/` is reachable (as in a fresh clone), so a block may use what
an earlier one wrote (`digits.weights.npz`, `mlp_digits.dlc/`). How a block runs is its
language; an HTML comment on the line before it changes that:

- `<!-- not run: REASON -->`: skipped for REASON (a browser, an MPI launcher, a second GPU,
  a file the repository does not ship); the test fails on a skip without a reason.
- `<!-- file: NAME -->`: the block is a file later blocks use, written to NAME.
- `python`: run as a script by this Python (GL where there is a context, as a user's would).
- `sh`: each command line (comments dropped, `\\` continuations joined) run by bash, which must
  exit 0; a leading `pip install ... &&` is dropped (the suite runs where dlc is installed).
- `console`: `$ COMMAND` lines run by bash; the lines after one, to the next `$`, are its
  output (stdout and stderr), compared line by line.
- `dl`: a model, compiled with `dlc.compile`.
- `text`: a diagram or a listing, nothing to run.
Any other language, or none, must say `not run` (so a new block is run or says why not).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNNABLE = {"python", "sh", "console", "dl", "text"}
TAG = re.compile(r"<!--\s*(not run|file):\s*(.*?)\s*-->")


@dataclass
class Block:
    line: int  # of the opening fence, counted from 1
    lang: str
    text: str
    tag: str | None = None  # "not run" or "file"
    arg: str = ""  # the reason, or the file name

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang or 'no language'})"


def readme_blocks(text: str) -> list[Block]:
    blocks, lines, k = [], text.split("\n"), 0
    while k < len(lines):
        fence = re.match(r"^(```+)\s*(\S*)\s*$", lines[k])
        if not fence:
            k += 1
            continue
        end = next((j for j in range(k + 1, len(lines)) if lines[j].startswith(fence.group(1))), None)
        assert end is not None, f"README.md:{k + 1}: a code block that is never closed"
        block = Block(k + 1, fence.group(2), "\n".join(lines[k + 1 : end]) + "\n")
        before = next((lines[j] for j in range(k - 1, -1, -1) if lines[j].strip()), "")
        tag = TAG.search(before)
        if tag:
            block.tag, block.arg = tag.group(1), tag.group(2)
        blocks.append(block)
        k = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def test_every_block_is_run_or_says_why():
    assert len(BLOCKS) > 10
    for b in BLOCKS:
        if b.tag == "not run":
            assert b.arg, f"{b}: say why it is not run: <!-- not run: REASON -->"
        elif b.tag == "file":
            assert b.arg and "/" not in b.arg, f"{b}: <!-- file: NAME --> names a file of the working folder"
        else:
            assert b.lang in RUNNABLE, f"{b}: a {b.lang or 'plain'} block runs as {sorted(RUNNABLE)} or says why not"


def test_readme_blocks_parse():
    # The harness itself: tags, languages, continuation lines.
    blocks = readme_blocks("x\n<!-- not run: a browser -->\n\n```js\nf()\n```\n```sh\na \\\n  b\n```\n")
    assert [(b.line, b.lang, b.tag, b.arg) for b in blocks] == [(4, "js", "not run", "a browser"), (7, "sh", None, "")]
    assert shell_commands(blocks[1].text) == ["a b"]
    assert shell_commands('pip install -e ".[test]" && dlc info  # what runs\n') == ["dlc info  # what runs"]


def shell_commands(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", "", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        out.append(re.sub(r"^pip install [^&]*&&\s*", "", line))
    return out


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"console output before any '$ ' command: {line!r}"
            steps[-1][1].append(line)
    return steps


def bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["COLUMNS"] = "120"
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
    )


def run_block(b: Block, cwd: Path) -> None:
    if b.tag == "file":
        (cwd / b.arg).write_text(b.text, encoding="utf-8")
    elif b.lang == "python":  # its own process, as a user's script (no global state shared)
        script = cwd / f"readme_{b.line}.py"
        script.write_text(b.text, encoding="utf-8")
        p = bash(f"python {script.name}", cwd)
        assert p.returncode == 0, f"{b} failed:\n{p.stdout[-2000:]}{p.stderr[-3000:]}"
    elif b.lang == "sh":
        for command in shell_commands(b.text):
            p = bash(command, cwd)
            assert p.returncode == 0, f"{b}: `{command}` exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
    elif b.lang == "console":
        for command, shown in console_steps(b.text):
            p = bash(command, cwd)
            got = (p.stdout + p.stderr).rstrip("\n").split("\n")
            assert got == shown, f"{b}: `{command}` printed\n" + "\n".join(got) + "\nnot\n" + "\n".join(shown)
    elif b.lang == "dl":
        import dlc

        dlc.compile(b.text)


@pytest.mark.slow
def test_readme_code_runs_as_written(tmp_path, monkeypatch):
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    monkeypatch.chdir(tmp_path)
    skipped = []
    for b in BLOCKS:
        if b.tag == "not run" or b.lang == "text":
            skipped.append(f"{b}: {b.arg or 'text'}")
            continue
        run_block(b, tmp_path)
    print("\n".join(["not run:", *skipped]))


def test_ci_runs_the_readme_test_command():
    shown = next(b for b in BLOCKS if "python -m pytest" in b.text)
    command = shell_commands(shown.text)[0]  # `python -m pytest -q -n auto`
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert command.replace("python ", "python3 ", 1) in ci.splitlines()
