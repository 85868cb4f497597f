"""The glfw context path (a hidden window), run on a virtual X display.

Headless machines have no display, so EGL is the default there; this checks the
other path a desktop user gets with DLC_GL=glfw, end to end through a Session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gl

SCRIPT = """
import numpy as np
import dlc
from dlc.runtime.device import get_context
ctx = get_context()
print("platform", ctx.platform)
sess = dlc.Session(dlc.compile("input x: [N]\\nout = relu(x) * 2 + 1\\n"), backend="gl")
print("out", sess.eval("out", {"x": np.array([-1.0, 0.5, 2.0], np.float32)}).tolist())
"""


@pytest.mark.skipif(
    shutil.which("xvfb-run") is None, reason="xvfb-run is not installed (Debian package xvfb): no display for glfw"
)
def test_a_session_runs_on_a_glfw_context():
    env = {k: v for k, v in os.environ.items() if k not in ("PYOPENGL_PLATFORM", "DLC_EGL_DEVICE")}
    env["DLC_GL"] = "glfw"
    r = subprocess.run(
        ["xvfb-run", "-a", sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "platform glfw" in r.stdout
    assert "out [1.0, 2.0, 5.0]" in r.stdout


TWO_WINDOWS = """
import numpy as np
import dlc
model = dlc.compile("input x: [N]\\nout = relu(x) * 2 + 1\\n")
x = np.array([-1.0, 0.5, 2.0], np.float32)
first = dlc.gl_devices()[0]
second = dlc.open_gl_device()
with second:
    there = dlc.Session(model, backend="gl")
here = dlc.Session(model, backend="gl")
import glfw
from dlc.runtime.context import _address
def current(device):  # asked of glfw, not of dlc
    return _address(glfw.get_current_context()) == _address(device.context._handles["window"])
for _ in range(2):
    a = here.eval("out", {"x": x}).tolist()
    on_first = current(first) and not current(second)
    b = there.eval("out", {"x": 2 * x}).tolist()
    print("out", a, b, on_first, current(second))
print("platforms", first.context.platform, second.context.platform, first.context is not second.context)
second.close()
print("after", here.eval("out", {"x": x}).tolist(), second.live_buffers)
"""


@pytest.mark.skipif(
    shutil.which("xvfb-run") is None, reason="xvfb-run is not installed (Debian package xvfb): no display for glfw"
)
def test_two_glfw_devices_alternate():
    env = {k: v for k, v in os.environ.items() if k not in ("PYOPENGL_PLATFORM", "DLC_EGL_DEVICE")}
    env["DLC_GL"] = "glfw"
    r = subprocess.run(
        ["xvfb-run", "-a", sys.executable, "-c", TWO_WINDOWS], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("out [1.0, 2.0, 5.0] [1.0, 3.0, 9.0] True True") == 2, r.stdout
    assert "platforms glfw glfw True" in r.stdout
    assert "after [1.0, 2.0, 5.0] 0" in r.stdout
