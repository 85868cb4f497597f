"""Fusion within the device's limits, checked on the shaders themselves (no GL needed).

Models built to hit each limit compile for both targets at the spec minimums (what an
artifact compiled offline assumes) and at llvmpipe's limits; every shader's storage blocks,
samplers, shared memory, work group and uniforms are counted from its text. The values are
checked on GL in tests/gl/test_fusion_limits_gl.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import dlc
from dlc.compiler import fusion
from dlc.compiler.emit import programs
from dlc.compiler.limits import SPEC_MINIMUMS, capabilities, device_limits
from dlc.runtime.errors import RuntimeFailure
from dlc.runtime.sizes import check_kernel, over_limits, shared_bytes, storage_blocks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gl"))
from test_fusion_limits_gl import concat_source, lstm_source, many_inputs_source  # noqa: E402

LLVMPIPE = {
    "max_compute_ssbo_blocks": 16,
    "max_ssbo_bindings": 16,
    "max_texture_units": 32,
    "max_compute_uniform_components": 16384,
}
LIMITS = {"spec": None, "llvmpipe": LLVMPIPE}
MODELS = {
    "lstm": lstm_source,
    "lstm_64": lambda: lstm_source(64, 64),  # bound 17 blocks on llvmpipe before
    "24_inputs": many_inputs_source,
    "concat_40": concat_source,
}


def _check(progs, limits, texture: bool) -> int:
    lim = device_limits(limits)
    checked = 0
    for p in progs.values():
        local = {k.file: k.local_size for k in p.spec.kernels}
        for name, text in p.sources.items():
            assert over_limits(text, None if texture else local[name], lim, fragment=texture) is None, name
            checked += 1
    return checked


@pytest.mark.parametrize("limits", list(LIMITS))
@pytest.mark.parametrize("target", ["compute", "texture"])
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("optimizer", ["Adam", "Adamax"])
def test_every_shader_fits_the_limits(model, target, limits, optimizer):
    m = dlc.compile(MODELS[model]())
    loss = "cost" if "cost" in m.graph.names else None
    opt = getattr(dlc, optimizer)(0.01) if loss else None
    options = {"limits": LIMITS[limits]} if LIMITS[limits] else None
    progs = programs(m, train_loss=loss, optimizer=opt, batch_size=64, target=target, options=options)
    assert _check(progs, LIMITS[limits], target == "texture")


def test_the_hand_unrolled_lstm_binds_up_to_the_device_and_no_further():
    # with llvmpipe's 16 blocks some kernel takes more than the spec's 8; none more than 16
    m = dlc.compile(lstm_source(64, 64))
    wide = programs(m, train_loss="cost", optimizer=dlc.Adamax(0.01), batch_size=64, options={"limits": LLVMPIPE})
    narrow = programs(m, train_loss="cost", optimizer=dlc.Adamax(0.01), batch_size=64)
    most = {
        name: max(storage_blocks(t) for t in progs["train"].sources.values())
        for name, progs in (("wide", wide), ("narrow", narrow))
    }
    assert SPEC_MINIMUMS["max_compute_ssbo_blocks"] < most["wide"] <= 16
    assert most["narrow"] <= SPEC_MINIMUMS["max_compute_ssbo_blocks"]
    assert len(narrow["train"].kernels) > len(wide["train"].kernels)


def test_a_concat_of_many_inputs_is_a_tree_fusion_can_cut():
    m = dlc.compile(concat_source(40))
    g = m.graph
    widest = max(len(n.inputs) for n in g.nodes if n.op == "concat")
    assert widest <= 4
    f = fusion.fuse(g, [g.names["y"]], caps=capabilities("compute"))
    caps = capabilities("compute")
    assert all(fusion.bound(f, k, caps) <= caps.budget(k.kind) for k in f.kernels)


def test_a_shader_past_the_device_is_refused_by_name_before_gl_links_it():
    # an artifact compiled for a device of 16 storage blocks, run where there are 8
    m = dlc.compile(lstm_source())
    wide = programs(m, train_loss="cost", optimizer=dlc.Adamax(0.01), options={"limits": LLVMPIPE})["train"]
    name, text = max(wide.sources.items(), key=lambda kv: storage_blocks(kv[1]))
    kernel = next(k for k in wide.spec.kernels if k.file == name)
    with pytest.raises(RuntimeFailure, match=rf"kernel '{kernel.name}' declares \d+ storage blocks; this GPU allows 8"):
        check_kernel(kernel.name, text, kernel.local_size, SPEC_MINIMUMS)
    check_kernel(kernel.name, text, kernel.local_size, device_limits(LLVMPIPE))  # fits where compiled for


@pytest.mark.parametrize("shared", [32768, 16384, 4096])
def test_a_matmul_takes_no_more_shared_memory_than_the_device_gives(shared):
    # 32 KiB is the spec's least; the blocked templates' tiles take it all, and 16x16 tiles
    # (2 KiB) are what is left for a device that gave less
    limits = {**SPEC_MINIMUMS, "max_shared_memory": shared}
    progs = programs(dlc.compile("input a: [256, 256]\nparam W: [256, 256]\ny = a @ W\n"), options={"limits": limits})
    (text,) = progs["eval"].sources.values()
    assert 0 < shared_bytes(text) <= shared
    assert ("16x16 tiles" in text) == (shared < 32768)
    assert _check(progs, limits, texture=False)
