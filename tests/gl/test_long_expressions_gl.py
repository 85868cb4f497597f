"""Long expressions through the GL code generator: a 1000-term sum and 600 nested calls fuse
into one kernel whose GLSL is generated without hitting Python's recursion limit, and the
values agree with the NumPy reference."""

from __future__ import annotations

import numpy as np

import dlc


def test_a_1000_term_sum_and_deep_nesting_evaluate_on_gl(gl):
    src = (
        "input x: [B]\n"
        "y = " + " + ".join(f"{k % 5} * x" for k in range(1000)) + "\n"
        "z = " + "sin(" * 600 + "x" + ")" * 600 + "\n"
    )
    model = dlc.compile(src)
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    got = dlc.Session(model, backend="gl").eval(["y", "z"], {"x": x})
    want = dlc.Session(model, backend="numpy").eval(["y", "z"], {"x": x})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    np.testing.assert_allclose(got["y"], sum(k % 5 for k in range(1000)) * x, rtol=1e-5)
    # 600 nested sins: a GPU's sin (NVIDIA's is an approximation) drifts by ~3e-4 from NumPy's
    np.testing.assert_allclose(got["z"], want["z"], rtol=1e-3, atol=1e-6)
