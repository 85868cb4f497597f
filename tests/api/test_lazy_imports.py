"""What a new process imports is what it needs (issue 14's warm start): each case runs in a
fresh interpreter, away from the checkout's folder, and lists the modules it ended up with."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Heavy packages and the layers above what a step needs.
WATCHED = ("numpy", "lark", "OpenGL", "rich", "asyncio", "pprint", "dlc.compiler", "dlc.runtime.gl")


def _imported(tmp_path, code: str) -> set[str]:
    """Which of WATCHED (or their submodules) a fresh process imported after running `code`."""
    probe = textwrap.dedent(code) + textwrap.dedent(f"""
        import json, sys
        watched = {WATCHED!r}
        print(json.dumps(sorted(w for w in watched if any(m == w or m.startswith(w + ".") for m in sys.modules))))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    if done.returncode != 0 and "no OpenGL context" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_import_dlc_imports_none_of_it(tmp_path):
    assert _imported(tmp_path, "import dlc") == set()


def test_compiling_a_model_imports_no_gl_and_no_codegen(tmp_path):
    got = _imported(
        tmp_path,
        """
        import dlc
        model = dlc.compile("input x: [B]\\nparam w: [] = 1\\nloss cost = mean((w * x)^2)\\n")
        assert model.losses == {"cost": ()}
        """,
    )
    assert {"lark", "numpy", "dlc.compiler"} <= got  # what it does need
    assert not got & {"OpenGL", "dlc.runtime.gl", "rich", "asyncio", "pprint"}


def test_dlc_check_imports_no_gl(tmp_path):
    model = tmp_path / "m.dl"
    model.write_text("input x: [B, 3]\nparam W: [3, 2]\ny = x @ W\n", encoding="utf-8")
    got = _imported(
        tmp_path,
        f"""
        from dlc.cli import main
        assert main(["check", {str(model)!r}]) in (0, None)
        """,
    )
    assert not got & {"OpenGL", "dlc.runtime.gl", "rich", "asyncio"}


@pytest.mark.gl
def test_a_gl_training_step_imports_no_asyncio_and_no_pprint(tmp_path):
    got = _imported(
        tmp_path,
        """
        import numpy as np
        import dlc
        sess = dlc.Session("input x: [B]\\nparam w: [] = 1\\nloss cost = mean((w * x)^2)\\n", backend="gl", seed=0)
        sess.train({"x": np.arange(4, dtype=np.float32)}, optimizer=dlc.Adam(0.1), batch_size=4, steps=1)
        """,
    )
    assert "dlc.runtime.gl" in got and "OpenGL" not in got  # dlc's own GL binding, not PyOpenGL
    assert not got & {"asyncio", "pprint", "rich"}
