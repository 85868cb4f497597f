"""Tensor sizes over what 32-bit index math reaches are refused where they are written."""

from __future__ import annotations

import pytest

import dlc
from dlc.runtime.sizes import MAX_ELEMENTS, check_bound


def error_of(source: str) -> dlc.CompileError:
    with pytest.raises(dlc.CompileError) as err:
        dlc.compile(source)
    return err.value


def test_a_fixed_shape_over_the_limit_is_a_compile_error_at_its_place():
    e = error_of("param w: [70000, 40000]\n")
    assert (e.line, e.column) == (1, 7)
    assert "param 'w': [70000, 40000] has 2,800,000,000 elements" in e.message
    assert "2,147,483,647 (2^31 - 1)" in e.message


def test_a_symbolic_shape_whose_fixed_dims_are_over_the_limit_is_refused():
    e = error_of("input x: [B, 70000, 40000]\n")
    assert (e.line, e.column) == (1, 7)
    assert "[B, 70000, 40000] has at least 2,800,000,000 elements" in e.message


def test_an_intermediate_over_the_limit_is_refused_at_its_operator():
    e = error_of(
        "input a: [B, 50000]\ninput b: [B, 50000]\ny = sum(reshape(a, [B, 50000, 1]) * reshape(b, [B, 1, 50000]))\n"
    )
    assert (e.line, e.column) == (3, 35)
    assert "mul: [B, 50000, 50000] has at least 2,500,000,000 elements" in e.message


def test_the_largest_fixed_size_passes():
    dlc.compile(f"input x: [B, {MAX_ELEMENTS}]\n")  # B = 1 is still possible


def spec(shape, kind="input"):
    from dlc.runtime.spec import ProgramSpec, Slot, TensorInfo

    return ProgramSpec(
        name="p",
        dims=("B",),
        slots=(Slot(kind, ((1, "B"),)),),
        tensors={0: TensorInfo(0, tuple(shape), "x")},
        roots=(0,),
        kernels=(),
        producer={},
    )


@pytest.mark.parametrize("b, ok", [(MAX_ELEMENTS // 7000, True), (MAX_ELEMENTS // 7000 + 1, False)])
def test_bound_dims_are_checked_at_the_edge(b, ok):
    s = spec(["B", 7000])
    if ok:
        check_bound(s, {"B": b}, max_block_bytes=2**40)
    else:
        with pytest.raises(
            dlc.DataError,
            match=rf"program 'p': input 'x' \[B, 7000\] with "
            rf"B = {b}: \[{b}, 7000\] has",
        ):
            check_bound(s, {"B": b}, max_block_bytes=2**40)


def test_bound_bytes_are_checked_against_the_storage_block_limit():
    check_bound(spec(["B", 10], "temp"), {"B": 100}, max_block_bytes=4000)
    with pytest.raises(dlc.DataError, match=r"tensor 'x' \[B, 10\] with B = 101 needs 4,040 bytes"):
        check_bound(spec(["B", 10], "temp"), {"B": 101}, max_block_bytes=4000)


def test_dlc_check_refuses_the_shape(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "big.dl"
    path.write_text("input x: [B, 70000, 40000]\ny = sum(x)\n")
    p = subprocess.run([sys.executable, "-m", "dlc", "check", str(path)], capture_output=True, text=True)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"{path}:1:7: error: input 'x': [B, 70000, 40000] has at least")


LIMITS = {"max_work_group_size": (1024, 1024, 64), "max_work_group_invocations": 1024, "max_shared_memory": 32768}


def test_kernels_over_the_work_group_or_shared_memory_limits_are_refused():
    from dlc.runtime.sizes import check_kernel, shared_bytes

    source = "shared vec4 sm[2048];  // a comment\nshared float part[16][17];\nshared bool last;\n"
    assert shared_bytes(source) == 16 * 2048 + 4 * 16 * 17 + 4
    check_kernel("k", "shared vec4 sm[2048];\n", (256, 1, 1), LIMITS)
    with pytest.raises(dlc.RuntimeFailure, match="kernel 'k' needs 33,860 bytes of shared memory"):
        check_kernel("k", source, (256, 1, 1), LIMITS)
    with pytest.raises(dlc.RuntimeFailure, match=r"work groups of \(1, 1, 65\) invocations"):
        check_kernel("k", "", (1, 1, 65), LIMITS)
    with pytest.raises(dlc.RuntimeFailure, match="1024 in all"):
        check_kernel("k", "", (64, 32, 1), LIMITS)
