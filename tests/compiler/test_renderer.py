"""The renderer seam (compiler/codegen/renderer.py): one Emitter, a renderer class per target.

No GL here: the texture shaders run in tests/gl/test_texture_target.py, the compute ones in
the rest of tests/gl.
"""

from __future__ import annotations

import re

import pytest

import dlc
from dlc.compiler import registry
from dlc.compiler.codegen import TEXTURE, CodegenOptions, get_target, render
from dlc.compiler.codegen.renderer import COMPUTE, GLSLCompute, GLSLESTexture, GLSLTexture
from dlc.compiler.fusion import bound, fuse
from dlc.compiler.lang import compile_source
from dlc.compiler.limits import capabilities
from dlc.compiler.pipeline import Options, compile_model
from dlc.compiler.plan import plan

ELEMENTWISE = {
    "broadcast": "input x: [B, 3, 4]\ninput b: [4]\ninput c: [3, 1]\ny = tanh(x * b - c) + sigmoid(x)\n",
    "layout": (
        "input x: [B, 4, 6]\ninput z: [B, 2, 6]\n"
        "y = transpose(concat([x, z], axis=1), [0, 2, 1]) * 2\n"
        "w = pad(slice(x, [0, 1, 0], [B, 2, 6]), [0, 1, 1], [0, 0, 2]) + 1\n"
    ),
    "gather": "input i: [B]\nparam E: [10, 4]\ny = one_hot(i, 10) * 3\nz = clip(reshape(E, [5, 8]), -1, 1)\n",
}

CONV_STEP = """
input images: [B, 6, 6, 2]
input labels: [B]
param k: [3, 3, 2, 3] = he
param W: [12, 3] = glorot
h = avg_pool(tanh(conv2d(images, k, stride=1, padding="valid")), 2)
m = max_pool(h, 1)
logits = reshape(m, [B, 12]) @ W
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
"""


def test_each_target_is_a_renderer_with_its_tables():
    assert get_target("compute").renderer(CodegenOptions()) is COMPUTE and isinstance(COMPUTE, GLSLCompute)
    core, es = (get_target("texture").renderer(CodegenOptions(es=es)) for es in (False, True))
    assert type(core) is GLSLTexture and type(es) is GLSLESTexture
    assert COMPUTE.version_lines() == ["#version 430"]
    assert core.version_lines() == ["#version 330 core"]
    assert es.version_lines()[0] == "#version 300 es" and "precision highp float;" in es.version_lines()
    assert COMPUTE.load("b2", "i + 1") == "b2.v[i + 1]" and COMPUTE.store("b0", "i", "v") == "b0.v[i] = v;"
    assert core.load("b2", "i + 1") == "dlc_load(b2, i + 1)" and core.store("b0", "i", "v") == "dlc_out = v;"
    assert "gl_GlobalInvocationID" not in COMPUTE.global_index()  # groups wrap onto y and z
    assert "gl_FragCoord" in core.global_index()
    assert core.bounds_check("i", "n") == "if (i >= n) { dlc_out = 0.0; return; }"
    assert COMPUTE.op("tanh", registry.get("tanh").lower(("glsl-compute",)), ["x"]) == "dlc_tanh(x)"
    assert core.op("leaky_relu", "a > 0.0 ? a : {alpha} * a", ["n1"], (("alpha", 0.5),)) == "n1 > 0.0 ? n1 : 0.5 * n1"


def test_an_unknown_target_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown target 'metal'"):
        get_target("metal")


def _main(text: str) -> list[str]:
    return text.split("void main() {\n", 1)[1].rsplit("}", 1)[0].splitlines()


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_emission_is_written_once_for_both_targets(name):
    """The same plan rendered for both targets: each texture pass's main() is the compute
    kernel's scalar main() line for line, but for the renderer's tables (load, store, own
    element, bounds check)."""
    g = compile_source(ELEMENTWISE[name], "t.dl")
    p = plan(fuse(g, sorted(set(g.names.values()))), {"B": 8})
    compute = render(p, {"vec4": False})
    tex = TEXTURE.kernels(p)
    assert len(compute) == len(tex) > 0
    compared = 0
    for ck, tk in zip(compute, tex):
        if len(tk.passes) != 1:
            continue
        want = []
        for line in _main(ck.source):
            line = line.replace(COMPUTE.global_index(), GLSLTexture().global_index())
            line = re.sub(r"if \((\w+) >= (.*)\) return;", r"if (\1 >= \2) { dlc_out = 0.0; return; }", line)
            line = re.sub(r"\bb\d+\.v\[([^\[\]]*)\] = (.*);$", r"dlc_out = \2;", line)
            want.append(re.sub(r"\b(b\d+)\.v\[([^\[\]]*)\]", r"dlc_load(\1, \2)", line))
        assert _main(tk.passes[0].source) == want
        compared += 1
    assert compared > 0


def test_texture_fusion_writes_one_output_a_kernel_compute_several():
    model = dlc.compile(CONV_STEP)
    kernels, updated = {}, {}
    for target in ("compute", "texture"):
        w = compile_model(model, Options(optimizer=dlc.Adam(0.01), batch_size=4, target=target))
        f = w.fusions["train"]
        updated[target] = {t for t, _ in f.updates}
        caps = capabilities(target)
        for k in f.kernels:
            assert bound(f, k, caps) <= caps.budget(k.kind)
        kernels[target] = f.kernels
    assert updated["compute"] == updated["texture"] and {"k", "W"} <= updated["texture"]
    assert any(len(k.outputs) > 1 for k in kernels["compute"])  # Adam's param, m and v together
    assert all(len(k.outputs) == 1 for k in kernels["texture"])
    # so no texture kernel renders a pass per output that recomputes its matmul or window op


def test_texture_shaders_read_only_through_the_renderer_and_declare_each_sampler():
    model = dlc.compile(CONV_STEP)
    for es in (False, True):
        w = compile_model(model, Options(optimizer=dlc.Adam(0.01), batch_size=4, target="texture", codegen={"es": es}))
        for prog in w.programs.values():
            for file, text in prog.sources.items():
                assert ".v[" not in text, file
                # through the renderer's load, or (packed matmul passes) their own texelFetch
                used = set(re.findall(r"(?:dlc_load|texelFetch|textureSize)\((b\d+),", text))
                declared = set(re.findall(r"uniform sampler2D (b\d+);", text))
                assert used == declared, file
                assert text.splitlines()[0] == ("#version 300 es" if es else "#version 330 core")
