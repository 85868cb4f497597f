"""Eager numbers as uniforms, flat kernels over any length, the bounded program cache, and
dlc.memory()'s account of programs and sessions. Results are checked against NumPy float32."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dlc
from dlc.runtime import cache_limit

rng = np.random.default_rng(7)

# Numbers a loop might pass: signed zeros, NaN, infinities, tiny and huge, ints, numpy scalars.
NUMBERS = [
    0.0,
    -0.0,
    1.0,
    -2.5,
    0.1,
    1e-30,
    -1e-45,
    3.4e38,
    1e39,
    float("nan"),
    float("inf"),
    float("-inf"),
    7,
    -3,
    np.float32(0.75),
    np.float64(-1.25),
    np.int64(4),
]

# op -> NumPy float32 oracle, number on the right (x op c) and on the left (c op x)
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, NaN where NumPy has NaN, and the sign of every zero as NumPy's."""
    want = np.asarray(want, np.float32)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # GPUs may flush subnormal results to zero (NVIDIA's GLSL does; README "Limits")
    flushed = (want != 0) & (np.abs(want) < np.finfo(np.float32).tiny) & (got == 0)
    want = np.where(flushed, got, want)
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=0)
    zeros = ok & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


class _Links:
    """GL programs linked since it was made (compiled or loaded from the binary cache):
    `links[0]`, read when asked."""

    def __init__(self):
        self.start = self._now()

    @staticmethod
    def _now() -> int:
        from dlc.runtime import program

        return program.link_counts["compiled"] + program.link_counts["from_disk"]

    def __getitem__(self, index: int) -> int:
        return self._now() - self.start


@pytest.fixture
def links():
    """Counts GL program links, whatever the cache holds."""
    return _Links()


@pytest.fixture
def small_cache():
    """A program cache of 6, put back afterwards."""
    dlc.set_program_cache_limit(6)
    yield 6
    dlc.set_program_cache_limit(None)


def test_numbers_are_not_baked_into_kernels(backend):
    host = np.array([[-1.5, 0.0, -0.0, 2.0], [3.0, np.inf, -np.inf, np.nan]], np.float32)
    x = dlc.array(host)
    # NVIDIA flushes subnormal operands and results to zero, dropping the sign of some (README
    # "Limits"): a subnormal number is left out there; every other number is checked.
    flushes = backend == "gl" and (dlc.array(np.ones(1, np.float32)) * 1e-45).numpy()[0] == 0
    tiny = np.finfo(np.float32).tiny
    numbers = [c for c in NUMBERS if not (flushes and 0 < abs(float(c)) < tiny)]
    dlc.ops.clear_cache()  # the kernels counted below
    with np.errstate(all="ignore"):
        for name, fn in BINARY.items():
            for c in numbers:
                c32 = np.float32(c)
                same(getattr(dlc.ops, name)(x, c).numpy(), fn(host, c32))
                same(getattr(dlc.ops, name)(c, x).numpy(), fn(c32, host))
    # one kernel for each op and side, whatever the number
    assert dlc.ops.cached_kernels() == 2 * len(BINARY)


@pytest.mark.gl
def test_two_thousand_scalars_link_one_program(gl, links):
    x_host = rng.uniform(-3, 3, 37).astype(np.float32)
    x = dlc.array(x_host)
    before = dlc.memory()
    cs = rng.normal(0, 10, 2000)
    with dlc.tidy():
        for i, c in enumerate(cs):
            y = x * float(c)
            if i % 50 == 0:
                same(y.numpy(), x_host * np.float32(c))
    assert links[0] <= 1  # `x * c` for any c (and any length) is one program
    after = dlc.memory()
    assert after.programs - before.programs <= 1
    assert after.eager_ops - before.eager_ops <= 1
    assert after.arrays == before.arrays  # nothing leaks: the buffers are in use or pooled for reuse
    assert after.gl_buffers - after.gl_pooled == before.gl_buffers - before.gl_pooled


@pytest.mark.gl
def test_numbers_are_float_uniforms_in_the_glsl(gl):
    from dlc.runtime import program

    x = dlc.array(np.ones(8, np.float32))
    x * 123.25
    sources = [p.source for p in program._cache.values() if "123.25" in p.source or "scalar" in p.source]
    assert sources and all("123.25" not in s for s in sources)
    assert any("uniform float scalar" in s for s in sources)


def test_flat_elementwise_ops_compile_once_for_every_shape(backend, links):
    dlc.ops.clear_cache()
    shapes = [(1,), (3,), (2, 5), (7, 3), (4,), (2, 2, 3), (16, 8), (5, 0 + 1, 3)]
    for shape in shapes:
        a_host = rng.normal(size=shape).astype(np.float32)
        b_host = rng.normal(size=shape).astype(np.float32)
        a, b = dlc.array(a_host), dlc.array(b_host)
        same((a * b + 0.5).numpy(), a_host * b_host + np.float32(0.5))
        same(dlc.ops.where(a > 0.0, a, -0.0).numpy(), np.where(a_host > 0, a_host, np.float32(-0.0)))
        same(dlc.ops.clip(a, -0.25, b).numpy(), np.minimum(np.maximum(a_host, np.float32(-0.25)), b_host))
        same(dlc.ops.tanh(a).numpy(), np.tanh(a_host))
    # mul, add, gt, where, clip, tanh: each once with vec4 lanes (length % 4 == 0), once without
    assert dlc.ops.cached_kernels() == 2 * 6
    if backend == "gl":
        assert links[0] <= 2 * 6


def test_whole_array_reductions_compile_once_for_every_shape(backend):
    dlc.ops.clear_cache()
    for shape in [(1,), (5,), (2, 3), (4, 4), (7, 3, 2), (1000,), (300, 7)]:
        host = rng.normal(size=shape).astype(np.float32)
        a = dlc.array(host)
        for name in ("sum", "mean", "max", "min"):
            got = getattr(dlc.ops, name)(a).numpy()
            want = getattr(np, name)(host.astype(np.float64))
            assert got.shape == ()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dlc.ops.cached_kernels() == 4
    a = dlc.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(dlc.ops.sum(a, keepdims=True).numpy(), [[15.0]])
    np.testing.assert_array_equal(dlc.ops.max(a, axis=1).numpy(), [2.0, 5.0])
    assert dlc.ops.cached_kernels() == 6  # axes and keepdims: compiled for the shape


def test_broadcasting_ops_compile_once_per_pattern(backend):
    dlc.ops.clear_cache()
    for b, c in [(2, 3), (5, 3), (7, 6), (16, 2), (3, 9)]:
        x_host = rng.normal(size=(b, c)).astype(np.float32)
        row_host, col_host = rng.normal(size=c).astype(np.float32), rng.normal(size=(b, 1)).astype(np.float32)
        x, row, col = dlc.array(x_host), dlc.array(row_host), dlc.array(col_host)
        same((x + row).numpy(), x_host + row_host)  # [B, C] + [C]
        same((col * row - 1.5).numpy(), col_host * row_host - np.float32(1.5))  # [B, 1] * [C]: an outer product
        same(dlc.ops.where(x > col, row, -0.0).numpy(), np.where(x_host > col_host, row_host, np.float32(-0.0)))
    # add, mul, gt, where over [D0, D1] patterns; `- 1.5` is flat (one shape and a number):
    # vec4 lanes for 16 x 2, scalar lanes for the others
    assert dlc.ops.cached_kernels() == 6
    with pytest.raises(dlc.CompileError, match=r"\[3\] and \[4\] do not broadcast"):
        dlc.array(np.ones(3, np.float32)) + dlc.array(np.ones(4, np.float32))


def test_other_ops_still_compile_per_shape(backend):
    a_host, b_host = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    a, b = dlc.array(a_host), dlc.array(b_host)
    same((a - b).numpy(), a_host - b_host)
    same((b * 2.0 - a).numpy(), b_host * np.float32(2) - a_host)
    same(dlc.ops.sum(a * 3.0, axis=0).numpy(), (a_host * np.float32(3)).sum(0))
    same(dlc.ops.add(dlc.array(2.0), 3.0).numpy(), np.float32(5))
    same(dlc.ops.add(2.0, -3.0).numpy(), np.float32(-1))
    same(dlc.ops.reshape(4.5, [1, 1]).numpy(), np.full((1, 1), 4.5, np.float32))
    same((a * 10**400).numpy(), a_host * np.float32(np.inf))  # past float64: infinite
    same((a - -(10**400)).numpy(), a_host + np.float32(np.inf))
    same((a**2).numpy(), a_host**2)
    same((2.0**a).numpy(), np.float32(2) ** a_host)


@pytest.mark.gl
def test_cache_never_exceeds_its_bound_and_deletes_what_it_evicts(gl, small_cache):
    from dlc.runtime import program
    from dlc.runtime.gl import GL

    gc.collect()  # sessions earlier tests dropped unpin their programs
    dlc.ops.clear_cache()
    seen: dict[int, program.Program] = {}
    handles: dict[int, int] = {}  # id of a program -> the GL handle it had
    results = []
    for n in range(1, 21):  # sums over 20 shapes: 20 programs, 20 eager ops
        host = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        results.append((host, dlc.ops.sum(dlc.array(host), axis=0)))
        for p in program._cache.values():
            seen[id(p)] = p
            handles[id(p)] = p.handle
        stats = program.program_cache_stats()
        # Programs of sessions still alive (earlier tests') are pinned: they count, unevictable.
        assert stats["programs"] <= small_cache + stats["pinned"] and stats["limit"] == small_cache
        assert dlc.ops.cached_kernels() <= small_cache
        assert dlc.memory().programs <= small_cache + stats["pinned"]
    evicted = [p for p in seen.values() if p.source not in program._cache]
    assert len(evicted) >= 20 - small_cache
    for p in evicted:
        assert p.handle == 0
    for host, out in results:
        same(out.numpy(), host.sum(0))  # results computed before eviction are intact
    # an evicted op runs again correctly (linked anew)
    host = np.arange(3, dtype=np.float32).reshape(1, 3)
    same(dlc.ops.sum(dlc.array(host), axis=0).numpy(), host.sum(0))
    # GL itself no longer knows them (unless a later program got the same number)
    GL.glUseProgram(0)  # a deleted program stays alive while it is the current one
    live = {p.handle for p in program._cache.values()}
    gone = [handles[id(p)] for p in evicted if handles[id(p)] not in live]
    assert gone and not any(GL.glIsProgram(h) for h in gone)


@pytest.mark.gl
def test_an_evicted_flat_program_is_linked_again(gl, small_cache, links):
    x_host = rng.normal(size=10).astype(np.float32)
    x = dlc.array(x_host)
    same((x * 3.0).numpy(), x_host * 3)
    for n in range(1, 10):  # push the flat `mul` program out
        dlc.ops.sum(dlc.array(np.ones((n, 2), np.float32)), axis=0)
    before = links[0]
    same((x * -4.0).numpy(), x_host * np.float32(-4))
    assert links[0] == before + 1


@pytest.mark.gl
def test_programs_of_a_live_session_are_never_evicted(gl, small_cache):
    from dlc.runtime import program

    model = dlc.compile("input x: [B, 3]\nparam w: [3, 2] = ones\ny = relu(x @ w) * 2\n")
    sess = dlc.Session(model, backend="gl")
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3)}
    want = np.maximum(feeds["x"] @ np.ones((3, 2), np.float32), 0) * 2
    pins = {id(p): p.pins for p in program._cache.values()}
    same(sess.eval("y", feeds), want)
    pinned = [p for p in program._cache.values() if p.pins > pins.get(id(p), 0)]
    assert pinned
    for n in range(1, 15):
        dlc.ops.sum(dlc.array(np.ones((n, 5), np.float32)), axis=1)
    assert all(p.handle and program._cache.get(p.source) is p for p in pinned)
    same(sess.eval("y", feeds), want)
    sess.backend.close()
    assert all(p.pins == pins.get(id(p), 0) for p in pinned)


@pytest.mark.gl
def test_a_dropped_session_unpins_its_programs(gl):
    import gc

    from dlc.runtime import program

    model = dlc.compile("input x: [B]\ny = exp(x) * 3 + 1\n")
    sess = dlc.Session(model, backend="gl")
    pins = {id(p): p.pins for p in program._cache.values()}
    sess.eval("y", {"x": np.zeros(3, np.float32)})
    pinned = [p for p in program._cache.values() if p.pins > pins.get(id(p), 0)]
    assert pinned
    del sess
    gc.collect()
    assert all(p.pins == pins.get(id(p), 0) for p in pinned)


def test_cache_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv(cache_limit.CACHE_ENV, "12")
    try:
        cache_limit.set_limit(None)
        assert cache_limit.limit() == 12 == dlc.ops.cache_limit()
        monkeypatch.setenv(cache_limit.CACHE_ENV, "lots")
        with pytest.raises(ValueError, match="DLC_PROGRAM_CACHE='lots'"):
            cache_limit.set_limit(None)
        monkeypatch.delenv(cache_limit.CACHE_ENV)
        cache_limit.set_limit(None)
        assert cache_limit.limit() == cache_limit.DEFAULT_CACHE_LIMIT
        for bad in (0, -1, 2.5, True, "8"):
            with pytest.raises(ValueError, match="int >= 1"):
                dlc.set_program_cache_limit(bad)
    finally:
        monkeypatch.delenv(cache_limit.CACHE_ENV, raising=False)
        cache_limit.set_limit(None)


def test_lowering_the_limit_shrinks_the_eager_cache(backend):
    dlc.ops.clear_cache()
    for n in range(1, 6):
        dlc.ops.sum(dlc.array(np.ones((n, 2), np.float32)), axis=0)
    assert dlc.ops.cached_kernels() == 5
    try:
        dlc.set_program_cache_limit(2)
        assert dlc.ops.cached_kernels() == 2
    finally:
        dlc.set_program_cache_limit(None)


@pytest.mark.gl
def test_memory_reports_programs_and_what_sessions_hold(gl):
    from dlc.runtime import program

    model = dlc.compile(
        "input x: [B, 3]\ninput t: [B, 2]\nparam w: [3, 2] = ones\nparam b: [2] = zeros\n"
        "loss cost = mean_squared(x @ w + b, t)\n"
    )
    sess = dlc.Session(model, backend="gl")
    data = {"x": rng.normal(size=(16, 3)).astype(np.float32), "t": rng.normal(size=(16, 2)).astype(np.float32)}
    sess.train(data, optimizer=dlc.Adam(0.01), batch_size=4, epochs=1)
    mem = dlc.memory()
    s = mem.sessions
    assert s.sessions >= 1
    mine = sess.backend.memory()
    assert mine["params"] == (2, 4 * (6 + 2))  # w and b
    assert mine["state"][0] >= 4 and mine["state"][1] >= 4 * 2 * (6 + 2)  # Adam's m and v at least
    assert mine["slots"][1] > 0 and mine["snapshots"][1] >= mine["params"][1]
    assert s.bytes == s.params + s.state + s.data + s.snapshots + s.slots
    assert s.params >= mine["params"][1] and s.slots >= mine["slots"][1]
    assert mem.gl_bytes >= s.bytes + mem.bytes
    stats = program.program_cache_stats()
    assert (mem.programs, mem.program_bytes, mem.program_cache_limit) == (
        stats["programs"],
        stats["bytes"],
        stats["limit"],
    )
    assert mem.program_bytes >= mem.programs > 0
    assert mem.eager_ops == dlc.ops.cached_kernels()
    sess.backend.close()
    after = dlc.memory()
    assert after.gl_bytes <= mem.gl_bytes - s.params  # its buffers are freed
    assert sess.backend.memory()["params"] == (0, 0)


def test_memory_fields(backend):
    a = dlc.array(np.ones((2, 3), np.float32))
    mem = dlc.memory()
    assert mem.arrays >= 1 and mem.bytes >= a.nbytes
    assert isinstance(mem.eager_ops, int)
    if backend == "gl":
        assert mem.gl_buffers >= 1 and mem.programs is not None and mem.program_cache_limit >= 1


@pytest.mark.gl
def test_an_op_of_several_kernels_runs_right_when_the_cache_holds_one(gl):
    """Linking one evicted kernel of an op must not evict another of the same op (the H100
    found softmax launching program 0 after a long test run had filled the cache)."""
    from dlc.backends.gl_eager import _compiled

    dlc.ops.clear_cache()
    host = rng.normal(size=(3, 7)).astype(np.float32)
    dlc.set_program_cache_limit(1)
    try:
        for _ in range(2):  # linked anew each time: the cache keeps one program
            got = dlc.ops.softmax(dlc.array(host), axis=-1).numpy()
            e = np.exp(host - host.max(-1, keepdims=True))
            np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)
        assert max(len(c.launches) for c in _compiled.values()) > 1  # several kernels, one op
    finally:
        dlc.set_program_cache_limit(None)


@pytest.mark.gl
def test_pinned_programs_do_not_crowd_eager_ops_out(gl, links):
    """Programs live sessions pin are not counted against the bound: with more of them than
    the limit, an eager op is still linked once, not at every call."""
    from dlc.runtime import program

    dlc.ops.clear_cache()
    x = dlc.array(np.arange(6, dtype=np.float32))
    dlc.set_program_cache_limit(2)
    held = [
        program.get_program(f"#version 430\nlayout(local_size_x = {n}) in;\nvoid main() {{}}\n", f"p{n}")
        for n in (1, 2, 3)
    ]
    for p in held:
        program.pin(p)
    try:
        before = links[0]
        for _ in range(5):
            same(dlc.ops.exp(x).numpy(), np.exp(np.arange(6, dtype=np.float32)))
        assert links[0] - before <= 1  # linked once, then kept beside the three pinned ones
    finally:
        for p in held:
            program.unpin(p)
        dlc.set_program_cache_limit(None)


def test_repeated_calls_take_the_short_path_and_still_check_their_arguments(backend, monkeypatch):
    """A call seen before (same function, argument shapes and numbers' places) skips binding
    and keying; its results, and its errors for a disposed array or arrays of two backends,
    are those of the full path."""
    from dlc import arrays, eager_kernels

    eager_kernels._seen.clear()  # (what an earlier test saw, on either backend, would be reused)
    full = []
    real = arrays._call
    monkeypatch.setattr(arrays, "_call", lambda *a: full.append(a[0]) or real(*a))
    x_host, y_host = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=5).astype(np.float32)
    x, y = dlc.array(x_host), dlc.array(y_host)
    for i in range(5):
        c = float(i) - 1.5
        same((x * c + y).numpy(), x_host * np.float32(c) + y_host)
        same(dlc.ops.maximum(c, x).numpy(), np.maximum(np.float32(c), x_host))
        same(x.relu().numpy(), np.maximum(x_host, 0))
    assert full == ["mul", "add", "maximum", "relu"]  # the first round only
    y.dispose()
    with pytest.raises(ValueError, match="was disposed"):
        x * 2.0 + y
    if backend == "gl":
        with pytest.raises(ValueError, match="different backends"):
            x * 2.0 + dlc.array(y_host, backend="numpy")
    with pytest.raises(ValueError, match="no function 'relux', did you mean 'relu'"):
        dlc.ops.call("relux", (x,), {})
