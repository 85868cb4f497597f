"""The matmul tuning table (compiler/codegen/matmul_tuning.py): device families from renderer
strings, every entry valid, choices read from the table, forced switches, clear errors for bad
options, and the variant recorded in the kernel (deterministic for artifacts)."""

from __future__ import annotations

import pytest

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.codegen import matmul_tuning as tuning
from dlc.compiler.pipeline import compile_program


def _matmul(m, k, n, batch=None, ta=False, tb=False):
    b = GraphBuilder()
    a = b.input("a", ((batch,) if batch else ()) + ((k, m) if ta else (m, k)))
    w = b.input("w", (n, k) if tb else (k, n))
    y = b.add("matmul", [a, w], ta=ta, tb=tb)
    return b.build(), y


def _head(g, y, options=None, dims=None) -> str:
    return compile_program(g, [y], options=options, ref_dims=dims).kernels[0].source.split("\n")[1]


@pytest.mark.parametrize(
    "renderer,family",
    [
        ("NVIDIA H100 80GB HBM3/PCIe/SSE2", "NVIDIA H100"),
        ("NVIDIA H200/PCIe/SSE2", "NVIDIA H200"),
        ("llvmpipe (LLVM 15.0.6, 256 bits)", "llvmpipe"),
        ("AMD Radeon RX 7900 XTX (radeonsi, navi31, LLVM 15.0.7, DRM 3.49)", "default"),
        ("", "default"),
        (None, "default"),
    ],
)
def test_family_from_the_renderer_string(renderer, family):
    assert tuning.family(renderer) == family


@pytest.mark.parametrize("fam", list(tuning.TABLE))
def test_every_table_entry_is_a_valid_variant_that_fits_its_shared_memory(fam):
    row = tuning.TABLE[fam]
    assert isinstance(row["wave"], int) and row["wave"] > 0
    assert row["shared_bytes"] >= 32768  # GL guarantees at least this much
    assert isinstance(row["short_chunk"], int) and 0 < row["short_chunk"] <= 1024
    for cls in tuning.CLASSES:
        v = tuning.lookup(fam, cls)
        if v is None:  # an optional class the family has not measured
            assert cls in tuning.OPTIONAL
            continue
        blk = v.blocking
        assert blk.problem() is None
        assert blk.threads <= 1024  # GL's minimum max work group invocations
        words = blk.bk * (blk.tm + blk.tn) // 4
        assert 16 * words <= row["shared_bytes"]
        # the literal round-trips (what tune_matmul.py --emit prints is what the table reads)
        assert tuning.variant(v.literal()) == v


def test_variant_literal_keeps_only_what_differs_from_the_defaults():
    v = tuning.Variant(tuning.Blocking(128, 64, 32, 8, 4, 2), double_buffer=True, warp=(4, 8))
    assert v.literal() == {"blocking": (128, 64, 32, 8, 4, 2), "double_buffer": True, "warp": (4, 8)}
    unswizzled = tuning.Variant(tuning.Blocking(64, 64, 16, 4, 4, 1, False))
    assert unswizzled.literal() == {"blocking": (64, 64, 16, 4, 4, 1, False)}


@pytest.mark.parametrize(
    "entry,message",
    [
        ({"blocking": (64, 64, 16, 4, 4), "dubble_buffer": True}, "unknown key 'dubble_buffer'"),
        ({"double_buffer": True}, "no 'blocking'"),
        ({"blocking": (64, 64, 16, 4)}, "blocking must be (tm, tn, bk, rm, rn"),
        ({"blocking": (64, 64, 16, 3, 4)}, "multiples of 4"),
        ({"blocking": (64, 64, 16, 4, 4, 3)}, "power of 2"),
        ({"blocking": (64, 64, 16, 4, 4), "warp": (4, 4)}, "rows * cols = 32"),
        ({"blocking": (64, 64, 16, 4, 4), "store4": "yes"}, "store4 must be true or false"),
    ],
)
def test_a_bad_variant_is_a_clear_error(entry, message):
    with pytest.raises(ValueError) as info:
        tuning.variant(entry, "codegen option matmul_variant")
    assert message in str(info.value) and "codegen option matmul_variant" in str(info.value)


def test_bad_codegen_options_are_clear_errors():
    g, y = _matmul(200, 64, 200)
    with pytest.raises(ValueError, match="unknown key 'warps'"):
        compile_program(g, [y], options={"matmul_variant": {"warps": (4, 8)}})
    with pytest.raises(ValueError, match="matmul_variant must be a dict"):
        compile_program(g, [y], options={"matmul_variant": "double"})
    with pytest.raises(ValueError, match="unknown matmul template 'huge'"):
        compile_program(g, [y], options={"matmul": "huge"})
    with pytest.raises(ValueError, match=r"needs 65536 bytes of shared memory, past the 32768"):
        compile_program(g, [y], options={"blocking": (128, 128, 64, 8, 8)})


def test_choices_come_from_the_device_row(monkeypatch):
    g, y = _matmul(1024, 1024, 1024)
    # 64 128x128 tiles: under the default wave of 128 work groups, so the "split" class
    assert "(default, split)" in _head(g, y)
    assert "(NVIDIA H100, split)" in _head(g, y, {"device": "NVIDIA H100 80GB HBM3/PCIe/SSE2"})
    # a row that says a wave is 32 groups makes the same product "big", with that row's switches
    row = {**tuning.TABLE["NVIDIA H100"], "wave": 32, "big": {"blocking": (128, 128, 16, 8, 8), "warp": (8, 4)}}
    monkeypatch.setitem(tuning.TABLE, "NVIDIA H100", row)
    head = _head(g, y, {"device": "NVIDIA H100 80GB HBM3/PCIe/SSE2"})
    assert "(NVIDIA H100, big)" in head and "128x128 tiles" in head and "warp 8x4" in head
    assert "(NVIDIA H200, split)" in _head(g, y, {"device": "NVIDIA H200"})  # other rows unchanged


def test_forced_switches_apply_over_the_table_choice():
    g, y = _matmul(1024, 1024, 1024)
    h200 = {"device": "NVIDIA H200"}  # 48 KiB of shared memory: two slabs fit
    head = _head(g, y, {**h200, "matmul_variant": {"double_buffer": True, "store4": True}})
    assert "64x128 tiles" in head  # the split class's blocking (the H200 row), kept
    assert "vec4 stores, double-buffered" in head and "switches forced" in head
    # the default row's 32 KiB do not hold two such slabs: single-buffered, and the header says so
    head = _head(g, y, {"matmul_variant": {"double_buffer": True}})
    assert "single-buffered: two slabs need 49152 bytes of shared memory, past 32768" in head
    head = _head(g, y, {"matmul_variant": {"blocking": (64, 64, 16, 4, 4), "warp": (4, 8)}})
    assert "64x64 tiles" in head and "warp 4x8" in head and "(forced)" in head


def test_the_source_is_a_function_of_the_options_alone():
    """Artifacts: the same model and options give the same GLSL, naming the row it came from."""
    g, y = _matmul(512, 1024, 512, batch=8)  # 128 tiles of 128x128: a wave (a K past "shortk"'s)
    a = compile_program(g, [y], options={"device": "NVIDIA H200"}).sources
    b = compile_program(g, [y], options={"device": "NVIDIA H200"}).sources
    assert a == b
    (source,) = a.values()
    assert "(NVIDIA H200, big)" in source.split("\n")[1]


def test_the_conv_templates_still_take_the_default_blockings():
    from dlc.compiler.codegen import kernels_conv
    from dlc.compiler.codegen import kernels_matmul as mm

    assert mm.BIG == tuning.lookup(None, "big").blocking
    assert kernels_conv._blocking("conv2d", 8192, 256, 576) == mm.BIG
    assert kernels_conv._blocking("conv2d", 1024, 128, 576) == mm.SPLIT


def test_a_weight_gradient_takes_the_splitk_row_where_the_family_has_one():
    # [1152, K] x [K, 384] over K = 16384 (the GPT's dW of the qkv projection): split across
    # work groups, in 27 tiles of 128x128 (>= an eighth of a wave)
    g, y = _matmul(1152, 16384, 384)
    head = _head(g, y, {"device": "NVIDIA H200"})
    assert "(NVIDIA H200, splitk)" in head and "128x128 tiles" in head and "K-chunks of" in head
    assert "slab loop written out" in head
    # [384, 384] (9 tiles) keeps the "split" row; llvmpipe has no "splitk" row at all
    g, y = _matmul(384, 16384, 384)
    assert "(NVIDIA H200, split)" in _head(g, y, {"device": "NVIDIA H200"})
    g, y = _matmul(1152, 16384, 384)
    assert "(llvmpipe, split)" in _head(g, y, {"device": "llvmpipe (LLVM 15)"})


def test_a_product_whose_tile_would_be_cut_takes_the_fitted_row_where_the_family_has_one():
    # [BT, 1536] x [1536, 384] (a GPT's MLP projection): 128x256 tiles would idle a third of
    # the 384 columns; the H200's "fitted" row's 128x192 tiles over slabs of 32 cover them
    g, y = _matmul(16384, 1536, 384)
    head = _head(g, y, {"device": "NVIDIA H200"})
    assert "(NVIDIA H200, fitted)" in head and "128x192 tiles" in head and "K-slabs of 32" in head
    # with B transposed too, over a long K; over a short K the H200's "shortk" row has 192-wide
    # tiles already, and nothing is cut
    g, y = _matmul(16384, 1152, 384, tb=True)
    assert "(NVIDIA H200, fitted)" in _head(g, y, {"device": "NVIDIA H200"})
    g, y = _matmul(16384, 384, 384, tb=True)
    head = _head(g, y, {"device": "NVIDIA H200"})
    assert "(NVIDIA H200, shortk)" in head and "128x192 tiles" in head
    # 1536 columns fill 256-wide tiles: no cut, the class's row; the H100 and llvmpipe rows
    # have no "fitted" variant: the class's tile, cut
    g, y = _matmul(16384, 384, 1536)
    assert "(NVIDIA H200, shortk)" in _head(g, y, {"device": "NVIDIA H200"})
    g, y = _matmul(16384, 1536, 384)
    assert "(NVIDIA H100, big, tile fitted to 16384x384)" in _head(g, y, {"device": "NVIDIA H100"})
    # A transposed: 128x192 slabs of 32 are no whole number of fetch rounds for 384
    # invocations, so the cut tile stays
    g, y = _matmul(16384, 1536, 384, ta=True)
    assert "tile fitted to 16384x384" in _head(g, y, {"device": "NVIDIA H200"})


def test_a_big_product_over_a_short_k_takes_the_shortk_row_where_the_family_has_one():
    # [4096, 384] x [384, 1536] (a GPT's projection from 384 channels): vec4 stores on NVIDIA,
    # and on the H200 192-wide tiles with A kept along K
    g, y = _matmul(4096, 384, 1536)
    head = _head(g, y, {"device": "NVIDIA H100"})
    assert "(NVIDIA H100, shortk)" in head and "vec4 stores" in head and "128x256 tiles" in head
    head = _head(g, y, {"device": "NVIDIA H200"})
    assert "(NVIDIA H200, shortk)" in head and "128x192 tiles" in head and "A kept along K" in head
    # a long K keeps "big"; llvmpipe has no "shortk" row at all
    g, y = _matmul(4096, 1024, 1536)
    assert "(NVIDIA H200, big)" in _head(g, y, {"device": "NVIDIA H200"})
    g, y = _matmul(4096, 384, 1536)
    assert "(llvmpipe, big)" in _head(g, y, {"device": "llvmpipe (LLVM 15)"})
