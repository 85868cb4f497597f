"""NaN, infinities and signed zeros: the inputs and the checks the NaN tests share.

`POW_CASES` is C99's powf (Annex F.9.4.4, which NumPy's float32 power follows), written out
case by case rather than computed with np.power, so it is an oracle for the reference and GL.
"""

from __future__ import annotations

import numpy as np

nan, inf = float("nan"), float("inf")

SPECIALS = np.array(
    [
        nan,
        inf,
        -inf,
        -0.0,
        0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        1e-3,
        100.0,
        -100.0,
        7.5,
        -7.5,
        1e30,
        -1e30,
    ],
    np.float32,
)

# (x, y, x^y)
POW_CASES = [
    (nan, 0.0, 1.0),
    (nan, -0.0, 1.0),
    (inf, 0.0, 1.0),
    (-3.0, 0.0, 1.0),  # x^+-0 = 1
    (1.0, nan, 1.0),
    (1.0, inf, 1.0),
    (1.0, -inf, 1.0),
    (1.0, -7.0, 1.0),  # 1^y = 1
    (nan, inf, nan),
    (nan, -inf, nan),
    (nan, 1.0, nan),
    (nan, 2.0, nan),
    (nan, -3.0, nan),
    (2.0, nan, nan),
    (0.0, nan, nan),
    (-1.0, nan, nan),
    (-1.0, inf, 1.0),
    (-1.0, -inf, 1.0),  # (-1)^+-inf = 1
    (0.5, inf, 0.0),
    (0.5, -inf, inf),
    (-0.5, inf, 0.0),
    (-0.5, -inf, inf),  # |x| < 1
    (2.0, inf, inf),
    (2.0, -inf, 0.0),
    (-2.0, inf, inf),
    (-2.0, -inf, 0.0),  # |x| > 1
    (0.0, -1.0, inf),
    (-0.0, -1.0, -inf),
    (-0.0, -3.0, -inf),  # 0 to odd y < 0
    (0.0, -2.0, inf),
    (-0.0, -2.0, inf),
    (-0.0, -0.5, inf),
    (-0.0, -inf, inf),
    (0.0, 3.0, 0.0),
    (-0.0, 3.0, -0.0),
    (-0.0, 1.0, -0.0),  # 0 to odd y > 0
    (-0.0, 2.0, 0.0),
    (-0.0, 0.5, 0.0),
    (-0.0, inf, 0.0),
    (inf, 0.5, inf),
    (inf, -0.5, 0.0),
    (inf, 3.0, inf),
    (inf, -3.0, 0.0),
    (-inf, 3.0, -inf),
    (-inf, 2.0, inf),
    (-inf, 0.5, inf),  # -inf
    (-inf, -3.0, -0.0),
    (-inf, -2.0, 0.0),
    (-inf, -0.5, 0.0),
    (-2.0, 3.0, -8.0),
    (-2.0, 2.0, 4.0),
    (-2.0, -1.0, -0.5),
    (-2.0, -2.0, 0.25),
    (-2.0, 0.5, nan),
    (-8.0, 1.0 / 3.0, nan),  # x < 0, y not whole
    (2.0, 0.5, 2.0**0.5),
    (10.0, 40.0, inf),
    (10.0, -50.0, 0.0),
    (-1e20, 3.0, -inf),
    (-3.0, 2.0**25, inf),  # large y is even
]

# Written out by hand (Python's % and round semantics), not computed with NumPy: (a, b, mod(a, b)),
# (x, round(x)) with halves to even, (a, b, logical_and(a, b)) with NaN true.
MOD_CASES = [
    (-1.0, 3.0, 2.0),
    (1.0, -3.0, -2.0),
    (5.5, 2.0, 1.5),
    (-5.5, 2.0, 0.5),
    (-0.0, 1.0, 0.0),
    (4.0, -2.0, -0.0),
    (7.0, inf, 7.0),
    (-7.0, inf, inf),
    (3.0, 0.0, nan),
    (inf, 2.0, nan),
]
ROUND_CASES = [(0.5, 0.0), (1.5, 2.0), (2.5, 2.0), (-0.5, -0.0), (-1.5, -2.0), (-0.4, -0.0), (2.4999, 2.0), (nan, nan)]
AND_CASES = [(0.0, 0.0, 0.0), (0.0, 3.0, 0.0), (1.0, 0.0, 0.0), (-2.0, 0.5, 1.0), (nan, 0.0, 0.0), (-0.0, nan, 0.0)]


def pow_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, y and the expected x^y of POW_CASES as float32 columns."""
    x, y, want = (np.array(col, np.float32) for col in zip(*POW_CASES))
    return x, y, want


def same_specials(got, want, what, rtol=1e-4, atol=1e-6, zero_signs=True):
    """NaN in exactly the same places, infinities (and zeros, where `zero_signs`) with the same
    sign, the rest close."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    where = np.argwhere(nan_got != nan_want)
    assert not where.size, (
        f"{what}: NaN differs at {where[:5].tolist()} (got {got[tuple(where[0])]}, want {want[tuple(where[0])]})"
    )
    inf = np.isinf(want) | np.isinf(got)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: infinities")
    zero = (want == 0) & (got == 0) & zero_signs
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"{what}: signs of zero")
    rest = ~(nan_want | inf)
    np.testing.assert_allclose(got[rest], want[rest], rtol=rtol, atol=atol, err_msg=what)
