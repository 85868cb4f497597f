"""Compute programs: results against NumPy, the cache, uniforms, and internal-error messages."""

from __future__ import annotations

import numpy as np
import pytest

from dlc.runtime.errors import RuntimeFailure

SCALE_ADD = """#version 430
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };
uniform int n;
uniform float u;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(n)) out_[i] = a[i] * 2.0 + u;
}
"""

# Writes x + 1000 * y over a 2-D grid: checks that all three group counts reach the GPU.
GRID = """#version 430
layout(local_size_x = 4, local_size_y = 2) in;
layout(std430, binding = 0) writeonly buffer Out { float out_[]; };
uniform int width;
void main() {
    uvec3 g = gl_GlobalInvocationID;
    out_[(g.z * gl_NumWorkGroups.y * 2u + g.y) * uint(width) + g.x] = float(g.x + 1000u * g.y
        + 100000u * g.z);
}
"""


@pytest.fixture
def gl(gl_context):
    from dlc.runtime import program, storage

    return program, storage


@pytest.mark.gl
def test_scale_add_matches_numpy(gl):
    program, storage = gl
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    a, out = storage.Buffer.from_array(x), storage.Buffer(x.nbytes, zero=True)
    try:
        kernel = program.get_program(SCALE_ADD, "scale_add")
        assert kernel.local_size == (64, 1, 1)
        kernel.set_int("n", x.size)
        kernel.set_float("u", 0.25)
        kernel.dispatch(((x.size + 63) // 64, 1, 1), [a, out])
        np.testing.assert_array_equal(out.download(), x * np.float32(2) + np.float32(0.25))
    finally:
        a.delete()
        out.delete()


@pytest.mark.gl
def test_three_dimensional_dispatch(gl):
    program, storage = gl
    groups = (3, 2, 2)
    width, height, depth = groups[0] * 4, groups[1] * 2, groups[2]
    out = storage.Buffer(width * height * depth * 4)
    try:
        kernel = program.get_program(GRID, "grid")
        assert kernel.local_size == (4, 2, 1)
        kernel.set_int("width", width)
        kernel.dispatch(groups, [out])
        z, y, x = np.meshgrid(np.arange(depth), np.arange(height), np.arange(width), indexing="ij")
        np.testing.assert_array_equal(out.download(), (x + 1000 * y + 100000 * z).ravel())
    finally:
        out.delete()


@pytest.mark.gl
def test_programs_are_cached_by_source(gl):
    program, _ = gl
    first = program.get_program(SCALE_ADD, "scale_add")
    assert program.get_program(SCALE_ADD, "another_name") is first
    assert first.uniform_location("u") >= 0
    assert first.uniform_location("not_there") == -1
    first.set_float("not_there", 1.0)  # ignored, as GL ignores location -1
    changed = program.get_program(SCALE_ADD.replace("2.0", "3.0"), "scale_add3")
    assert changed is not first and changed.handle != first.handle
    changed.delete()
    assert program.get_program(SCALE_ADD.replace("2.0", "3.0"), "scale_add3") is not changed


@pytest.mark.gl
def test_compile_error_names_the_kernel_and_shows_the_bad_line(gl):
    program, _ = gl
    broken = SCALE_ADD.replace("a[i] * 2.0", "a[i] * vec2(2.0)")
    with pytest.raises(program.ShaderError) as caught:
        program.get_program(broken, "broken_scale")
    error = caught.value
    message = str(error)
    assert isinstance(error, RuntimeFailure)
    assert message.startswith("internal dlc error:")
    assert "'broken_scale'" in message and "compile" in message
    assert error.line == 9
    assert ">  9 |     if (i < uint(n)) out_[i] = a[i] * vec2(2.0) + u;" in message
    assert "   8 |     uint i = gl_GlobalInvocationID.x;" in message  # context around it


@pytest.mark.gl
def test_link_error_is_a_shader_error(gl):
    program, _ = gl
    with pytest.raises(program.ShaderError, match="'no_main' failed to link"):
        program.get_program("#version 430\nlayout(local_size_x = 1) in;\nvoid f() {}\n", "no_main")


@pytest.mark.gl
def test_dispatch_refuses_what_the_gpu_cannot_do(gl, gl_context):
    program, storage = gl
    kernel = program.get_program(SCALE_ADD, "scale_add")
    buffer = storage.Buffer(4)
    too_many = gl_context.limits["max_work_group_count"][0] + 1
    with pytest.raises(RuntimeFailure, match="at most"):
        kernel.dispatch((too_many, 1, 1), [buffer, buffer])
    buffer.delete()
    with pytest.raises(RuntimeFailure, match="deleted buffer"):
        kernel.dispatch((1, 1, 1), [buffer, buffer])


@pytest.mark.parametrize(
    "log, line",
    [
        ("0:12(5): error: `x' undeclared\n0:14(2): error: more", 12),  # Mesa
        ('0(7) : error C1008: undefined variable "x"', 7),  # NVIDIA
        ("ERROR: 0:31: 'x' : undeclared identifier\nERROR: 1 compilation errors.", 31),  # AMD
        ("0:3(1): warning: unused\n0:9(4): error: bad", 9),  # a warning first
        ("error: compute shader lacks `main'", None),  # link logs name no line
    ],
)
def test_error_line_reads_each_drivers_log_format(log, line):
    from dlc.runtime.program import error_line

    assert error_line(log) == line


@pytest.mark.gl
def test_programs_linked_together_match_one_by_one_and_a_bad_one_is_named(gl):
    program, storage = gl
    sources = [SCALE_ADD.replace("2.0", f"{k}.0") for k in (5, 6, 7)]
    cached = program.get_program(sources[0], "five")
    got = program.get_programs([(sources[0], "five"), (sources[1], "six"), (sources[2], "seven"), (sources[1], "six")])
    assert got[0] is cached and got[1] is got[3] and got[1] is not got[2]
    assert got[2] is program.get_program(sources[2], "seven")  # in the cache like any other
    a = storage.Buffer.from_array(np.arange(8, dtype=np.float32))
    out = storage.Buffer(32)
    for k, prog in zip((5, 6, 7), got):
        prog.set_int("n", 8)
        prog.set_float("u", 1.0)
        prog.dispatch((1, 1, 1), [a, out])
        np.testing.assert_array_equal(out.download(), np.arange(8) * k + 1.0)
    broken = SCALE_ADD.replace("a[i] * 2.0", "a[i] * vec2(2.0)")
    with pytest.raises(program.ShaderError, match="'broken_scale'"):
        program.get_programs([(SCALE_ADD.replace("2.0", "8.0"), "eight"), (broken, "broken_scale")])
    for prog in got[:3]:
        prog.delete()
    a.delete()
    out.delete()
