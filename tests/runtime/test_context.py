"""The GL context: what it reports, and failing cleanly when there is none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (the context is a process-wide singleton)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.gl
def test_context_reports_a_usable_driver(gl_context):
    from dlc.runtime.device import get_context, has_context

    ctx = gl_context
    assert get_context() is ctx and has_context()
    assert ctx.gl_version >= (4, 3)
    assert ctx.version.startswith(f"{ctx.gl_version[0]}.{ctx.gl_version[1]}")
    assert ctx.vendor and ctx.renderer and ctx.glsl_version
    assert ctx.platform in ("egl", "glfw")
    assert (ctx.device_index is not None) == (ctx.platform == "egl")
    limits = ctx.limits
    # GL 4.3 guarantees these minimums.
    assert limits["max_ssbo_size"] >= 1 << 24
    assert limits["max_ssbo_bindings"] >= 8
    assert all(n >= 65535 for n in limits["max_work_group_count"])
    assert limits["max_work_group_size"][0] >= 1024
    assert limits["max_work_group_invocations"] >= 1024
    assert limits["max_shared_memory"] >= 32768
    assert "GL_ARB_compute_shader" in ctx.extensions or ctx.gl_version >= (4, 3)


@pytest.mark.gl
def test_fast_entry_points_are_resolved(gl_context):
    from dlc.runtime.device import current_device

    fast = current_device().fast

    for name in ("use_program", "dispatch", "memory_barrier", "uniform1i", "uniform1f"):
        assert callable(getattr(fast, name))
    fast.use_program(0)  # unbinding is always legal
    fast.memory_barrier(0)


@pytest.mark.gl
def test_describe_names_the_driver_and_backend(gl_context):
    from dlc.runtime.info import describe

    text = describe()
    assert gl_context.renderer in text
    assert gl_context.version in text
    assert "max work group count:" in text
    assert text.endswith("backend: gl")


def test_missing_egl_device_gives_no_context_and_one_line_reason():
    code = (
        "from dlc.runtime.errors import RuntimeFailure\n"
        "from dlc.runtime.device import get_context, has_context\n"
        "from dlc.runtime.info import describe\n"
        "print(has_context())\n"
        "try:\n"
        "    get_context()\n"
        "except RuntimeFailure as exc:\n"
        "    print('REASON', exc)\n"
        "print(describe())\n"
    )
    done = _python(code, DLC_EGL_DEVICE="99", DLC_GL="egl")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("REASON no OpenGL context:")
    # Where EGL exists the reason names the setting; where it does not, what to install.
    assert "DLC_EGL_DEVICE=99" in lines[1] or "install" in lines[1]
    assert lines[2] == lines[1].removeprefix("REASON ")
    assert lines[3] == "backend: numpy"


def test_importing_the_runtime_package_loads_no_gl():
    done = _python("import sys, dlc.runtime; print('OpenGL' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
