"""Devices: two GL contexts in one process, each with its own programs, buffers and counters.

On Mesa the second device is a second EGL context on the same display (or a second glfw
window); results are checked against the NumPy reference backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.runtime.errors import RuntimeFailure

pytestmark = pytest.mark.gl

MLP = """
input x: [B, 4]
input y: [B, 3]
param W: [4, 3]
param b: [3] = zeros
h = tanh(x @ W + b)
loss cost = mean_squared(h, y)
"""

QUADRATIC = """
input x: [B]
input y: [B]
param a: [] = normal(0, 1)
param c: [] = normal(0, 1)
p = a * x^2 + c
loss cost = mean_squared(p, y)
"""

SCALE = """#version 430
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer A { float v[]; } a;
uniform int n;
uniform float k;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(n)) a.v[i] = a.v[i] * k + 1.0;
}
"""


@pytest.fixture(autouse=True)
def _compute(gl_context):
    if not gl_context.has_compute:  # CI's texture-only run: these sessions need compute
        pytest.skip("this OpenGL has no compute shaders; the tests here run compute kernels")


@pytest.fixture
def second(gl_context):
    """A device of its own next to the default one, closed afterwards."""
    from dlc.runtime.device import open_device

    device = open_device()
    yield device
    device.close()


@pytest.fixture
def default(gl_context):
    from dlc.runtime.device import default_device

    return default_device()


def _is_current(device) -> bool:
    """Whether the driver's current context is `device`'s (asked of EGL / glfw, not of dlc)."""
    from dlc.runtime.context import _address

    handles = device.context._handles
    if device.context.platform == "egl":
        from dlc.runtime.gl import EGL

        return _address(EGL.eglGetCurrentContext()) == _address(handles["context"])
    import glfw

    return _address(glfw.get_current_context()) == _address(handles["window"])


def _data(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(24, 4)).astype(np.float32)
    return {"x": x, "y": np.tanh(x @ rng.normal(size=(4, 3))).astype(np.float32)}


def _quadratic_data() -> dict:
    x = np.linspace(-1, 1, 20, dtype=np.float32)
    return {"x": x, "y": (0.5 * x**2 - 0.25).astype(np.float32)}


def test_a_second_device_has_its_own_context_and_caches(default, second):
    from dlc.runtime.device import current_device, open_devices
    from dlc.runtime.program import get_program
    from dlc.runtime.storage import Buffer

    assert second is not default and second.context is not default.context
    assert second.context.renderer == default.context.renderer
    assert second.fast is not default.fast and second.programs is not default.programs
    assert open_devices()[0] is default and second in open_devices()
    assert current_device() is default  # opening a device does not switch to it

    on_default, on_second = get_program(SCALE, "scale", default), get_program(SCALE, "scale", second)
    assert on_default is not on_second
    assert default.programs[SCALE] is on_default and second.programs[SCALE] is on_second
    assert on_default.device is default and on_second.device is second

    values = np.arange(100, dtype=np.float32)
    a, b = Buffer.from_array(values, default), Buffer.from_array(values, second)
    try:
        assert a.device is default and b.device is second
        for k in (2.0, 3.0):  # alternating devices: each sees its own uniforms and data
            on_second.set_int("n", 100)
            on_second.set_float("k", k)
            on_default.set_int("n", 100)
            on_default.set_float("k", -k)
            on_second.dispatch((2, 1, 1), [b])
            on_default.dispatch((2, 1, 1), [a])
        expect_b = (values * 2 + 1) * 3 + 1
        expect_a = (values * -2 + 1) * -3 + 1
        np.testing.assert_array_equal(b.download(), expect_b)
        np.testing.assert_array_equal(a.download(), expect_a)
        with pytest.raises(RuntimeFailure, match="buffer of GL device"):
            on_default.dispatch((2, 1, 1), [b])
        with pytest.raises(ValueError, match="between GL devices"):
            a.copy_from(b)
    finally:
        a.delete()
        b.delete()


def test_sessions_on_two_devices_interleaved_match_numpy(default, second):
    mlp, quadratic = dlc.compile(MLP), dlc.compile(QUADRATIC)
    data, qdata = _data(1), _quadratic_data()
    with default:
        on_default = dlc.Session(mlp, backend="gl", seed=3)
    with second:
        on_second = dlc.Session(mlp, backend="gl", seed=3)
        other_model = dlc.Session(quadratic, backend="gl", seed=5)
    reference = dlc.Session(mlp, backend="numpy", seed=3)
    quadratic_reference = dlc.Session(quadratic, backend="numpy", seed=5)
    assert on_default.backend.store.device is default and on_second.backend.store.device is second

    for _ in range(3):  # each call must make its own device current again
        for sess in (on_second, on_default, other_model, reference, quadratic_reference):
            feeds = qdata if sess in (other_model, quadratic_reference) else data
            sess.train(feeds, optimizer=dlc.SGD(0.1), batch_size=8, epochs=1)
        want = reference.eval("h", data)
        np.testing.assert_allclose(on_default.eval("h", data), want, rtol=1e-4, atol=1e-5)
        assert _is_current(default) and not _is_current(second)
        np.testing.assert_allclose(on_second.eval("h", data), want, rtol=1e-4, atol=1e-5)
        assert _is_current(second) and not _is_current(default)
        np.testing.assert_allclose(
            other_model.eval("p", qdata), quadratic_reference.eval("p", qdata), rtol=1e-4, atol=1e-5
        )

    # Nothing of one device is used by the other.
    for device in (default, second):
        assert all(p.device is device for p in device.programs.values())
        assert all(b.device is device for b in device.buffers)
    assert not set(map(id, default.programs.values())) & set(map(id, second.programs.values()))
    for sess, device in ((on_default, default), (on_second, second), (other_model, second)):
        assert all(b.device is device for b in sess.backend.store.buffers.values())
    assert second.live_buffers == len(second.buffers) > 0
    from dlc.runtime import program, storage

    assert storage.live_buffers() == default.live_buffers + second.live_buffers
    assert storage.live_bytes() == default.live_bytes + second.live_bytes
    everywhere, stats = program.program_cache_stats(), [program.program_cache_stats(d) for d in (default, second)]
    assert (
        everywhere["programs"]
        == stats[0]["programs"] + stats[1]["programs"]
        == len(default.programs) + len(second.programs)
    )
    assert dlc.memory().programs == everywhere["programs"] and dlc.memory().gl_buffers == storage.live_buffers()


def test_closing_a_device_frees_its_objects_and_leaves_the_other(default, second):
    from dlc.runtime import program, storage

    mlp, data = dlc.compile(MLP), _data(2)
    with default:
        keep = dlc.Session(mlp, backend="gl", seed=0)
        before = keep.eval("h", data)
    with second:
        doomed = dlc.Session(mlp, backend="gl", seed=0)
    np.testing.assert_allclose(doomed.eval("h", data), before, rtol=1e-5, atol=1e-6)
    held = list(second.buffers)
    programs = list(second.programs.values())
    assert held and programs and second.live_bytes > 0
    counts = (storage.live_buffers(default), storage.live_bytes(default), dict(default.programs))

    second.close()
    assert second.closed and second.context._handles == {}
    assert second.live_buffers == second.live_bytes == 0 and not second.programs and not second.uniforms
    assert all(b.handle == 0 for b in held) and all(p.handle == 0 for p in programs)
    assert (storage.live_buffers(default), storage.live_bytes(default), dict(default.programs)) == counts
    assert program.program_cache_stats(default)["programs"] == len(counts[2])
    np.testing.assert_array_equal(keep.eval("h", data), before)
    with pytest.raises(RuntimeFailure, match="was closed"):
        doomed.eval("h", data)
    with pytest.raises(RuntimeFailure, match="was closed"):
        second.activate()
    second.close()  # closing twice does nothing


def test_with_a_device_selects_it_and_gives_back_the_previous(default, second):
    from dlc.runtime.device import current_device, get_context
    from dlc.runtime.storage import Buffer

    assert current_device() is default
    with second:
        assert current_device() is second and get_context() is second.context and _is_current(second)
        buffer = Buffer(16)
        with default:
            assert get_context() is default.context
        assert current_device() is second
    assert current_device() is default and buffer.device is second
    buffer.delete()

    with second:
        there = dlc.Session(dlc.compile(MLP), backend="gl", seed=0)
    there.eval("h", _data(0))  # leaves `second` current on this thread ...
    assert current_device() is second
    here = dlc.Session(dlc.compile(MLP), backend="gl", seed=0)  # ... but a new session goes on the default
    assert here.backend.store.device is default and there.backend.store.device is second


def test_a_new_limit_evicts_on_every_device(default, second):
    from dlc.runtime.program import get_program

    sources = [SCALE.replace("+ 1.0", f"+ {i}.5") for i in range(3)]
    try:
        for device in (default, second):
            for source in sources:
                get_program(source, "scale_variant", device)
        evicted = (default.evicted, second.evicted)
        dlc.set_program_cache_limit(2)
        # Programs of sessions still alive from earlier tests are pinned: they stay, beside at
        # most 2 unpinned ones.
        for device in (default, second):
            pinned = sum(1 for p in device.programs.values() if p.pins)
            assert len(device.programs) <= 2 + pinned
        assert len(second.programs) == 2 and second.evicted == evicted[1] + 1
        assert default.evicted >= evicted[0] + 1  # at least one of ours went there too
    finally:
        dlc.set_program_cache_limit(None)


def test_opening_a_device_that_does_not_exist_says_which(default):
    from dlc.runtime.device import open_device

    if default.context.platform != "egl":
        pytest.skip("EGL device numbers apply to the EGL platform")
    with pytest.raises(RuntimeFailure, match="EGL device 99"):
        open_device(egl_device=99)
    with pytest.raises(TypeError, match="egl_device must be an int"):
        open_device(egl_device="0")  # type: ignore[arg-type]


def test_another_thread_runs_a_session_on_its_own_device(default, second):
    import threading

    mlp, data = dlc.compile(MLP), _data(3)
    want = dlc.Session(mlp, backend="numpy", seed=4).eval("h", data)
    with default:
        here = dlc.Session(mlp, backend="gl", seed=4)
    got: dict = {}

    def work() -> None:
        try:
            with second:  # made on the main thread, free to move: nothing holds it there
                sess = dlc.Session(mlp, backend="gl", seed=4)
                got["h"] = sess.eval("h", data)
                sess.backend.close()
        except Exception as e:  # the assertion below shows it
            got["error"] = e
        try:
            default.activate()  # current on the main thread: refused, naming the way out
        except RuntimeFailure as e:
            got["refused"] = str(e)

    thread = threading.Thread(target=work)
    thread.start()
    np.testing.assert_allclose(here.eval("h", data), want, rtol=1e-5, atol=1e-6)
    thread.join(60)
    assert "error" not in got, got.get("error")
    np.testing.assert_allclose(got["h"], want, rtol=1e-5, atol=1e-6)
    assert "call release() on the Session" in got["refused"] and f"GL device {default.id}" in got["refused"]
    assert _is_current(default)


def test_a_session_released_on_one_thread_runs_on_another(default):
    import threading

    mlp, data = dlc.compile(MLP), _data(5)
    want = dlc.Session(mlp, backend="numpy", seed=6).eval("h", data)
    with default:
        sess = dlc.Session(mlp, backend="gl", seed=6)
    np.testing.assert_allclose(sess.eval("h", data), want, rtol=1e-5, atol=1e-6)  # current here now
    got: dict = {}

    def work() -> None:
        try:
            got["h"] = sess.eval("h", data)
        except RuntimeFailure as e:
            got["refused"] = str(e)
        else:
            sess.release()  # gives it back to the main thread

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    # refused while the main thread holds the device, naming public API (not release_current)
    assert "call release() on the Session" in got["refused"] and "release_current" not in got["refused"]
    sess.release()
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    np.testing.assert_allclose(got["h"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.eval("h", data), want, rtol=1e-5, atol=1e-6)  # back on this thread
    dlc.Session(mlp, backend="numpy").release()  # nothing to release: no error


def test_the_texture_target_is_refused_on_a_second_device(second):
    with second, pytest.raises(RuntimeFailure, match="texture target runs on the default GL device only"):
        dlc.Session(dlc.compile(MLP), backend="gl", target="texture")


def test_the_public_names_list_and_open_gl_devices(default):
    devices = dlc.gl_devices()
    assert devices[0] is default
    extra = dlc.open_gl_device()
    try:
        assert dlc.gl_devices() == [*devices, extra]
        assert "Device(" in repr(extra) and extra.limits["max_ssbo_bindings"] >= 8
    finally:
        extra.close()
    assert extra not in dlc.gl_devices() and "closed" in repr(extra)


CLOSE_DEFAULT = """
import numpy as np
import dlc
from dlc.runtime.errors import RuntimeFailure
x = dlc.array(np.array([1.0, -2.0, 3.0], np.float32), backend="gl")
print("before", dlc.ops.relu(x * 2).numpy().tolist())
sess = dlc.Session(dlc.compile("input v: [N]\\nout = v + 1\\n"), backend="gl")
old = dlc.gl_devices()[0]
old.close()
try:
    sess.eval("out", {"v": np.zeros(2, np.float32)})
except RuntimeFailure as e:
    print("session", e)
y = dlc.array(np.array([1.0, -2.0, 3.0], np.float32), backend="gl")
print("after", dlc.ops.relu(y * 2).numpy().tolist(), dlc.gl_devices()[0] is not old)
fresh = dlc.Session(dlc.compile("input v: [N]\\nout = v + 1\\n"), backend="gl")
print("fresh", fresh.eval("out", {"v": np.zeros(2, np.float32)}).tolist())
"""


def test_closing_the_default_device_starts_a_new_one_for_what_comes_after(gl_context):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CLOSE_DEFAULT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "before [2.0, 0.0, 6.0]"
    assert lines[1].startswith("session GL device 0 was closed")
    assert lines[2] == "after [2.0, 0.0, 6.0] True"
    assert lines[3] == "fresh [1.0, 1.0]"
