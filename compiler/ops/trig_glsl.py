"""sin, cos and tan in GLSL with exact range reduction, for both targets (GLSL 4.30, 3.30, ES 3.00).

Drivers' sin/cos reduce the argument with a short pi (llvmpipe's sin(3e38) is -1, NumPy's
0.8749) and are approximations even near 0. Here the argument |x| > pi/4 is reduced as
Payne and Hanek did: its 24-bit mantissa times the 128 bits of 2/pi its exponent selects,
in 32-bit integers (GLSL 3.30 and ES 3.00 have neither 64-bit integers nor umulExtended, so
products are taken in 16-bit halves), which gives the quadrant and 64 bits of the remainder
exactly; the remainder times pi/2 is summed in pieces whose products are exact in float.
sin and cos of the reduced argument r in [-pi/4, pi/4] are Cephes' sinf/cosf polynomials
(relative error about 1e-7), tan is their quotient.
"""

from __future__ import annotations

# floor(2/pi * 2^224) in 32-bit words, most significant first.
TWO_OVER_PI = (
    0xA2F9836E,
    0x4E441529,
    0xFC2757D1,
    0xF534DDC0,
    0xDB629599,
    0x3C439041,
    0xFE5163AB,
)

_WORDS = ", ".join(f"0x{w:08X}u" for w in TWO_OVER_PI)

HELPERS = (
    """
// The high and low words of the 64-bit product a * b, from 16-bit halves.
void dlc_umul(uint a, uint b, out uint hi, out uint lo) {
    uint a0 = a & 0xFFFFu, a1 = a >> 16, b0 = b & 0xFFFFu, b1 = b >> 16;
    uint p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0;
    uint mid = (p00 >> 16) + (p01 & 0xFFFFu) + (p10 & 0xFFFFu);
    lo = (mid << 16) | (p00 & 0xFFFFu);
    hi = a1 * b1 + (p01 >> 16) + (p10 >> 16) + (mid >> 16);
}

// Bits sh .. sh + 31 (0 <= sh < 32) of the 64-bit (high, low); two shifts, none by 32.
uint dlc_bits32(uint high, uint low, int sh) {
    return (low >> sh) | ((high << (31 - sh)) << 1);
}

// ax (finite, > pi/4) = (4k + q) pi/2 + r with |r| <= pi/4; returns r (Payne-Hanek, exact).
float dlc_trig_reduce(float ax, out int q) {
    const uint TWO_OVER_PI[7] = uint[7]("""
    + _WORDS
    + """);
    uint bits = floatBitsToUint(ax);
    int e = int(bits >> 23) - 150;  // ax = m 2^e, m a 24-bit integer
    uint m = (bits & 0x7FFFFFu) | 0x800000u;
    int j = e >= 2 ? (e - 2) >> 5 : 0;  // the words of 2/pi before j add only multiples of 4
    uint h0, l0, h1, l1, h2, l2, h3, l3;
    dlc_umul(m, TWO_OVER_PI[j], h0, l0);
    dlc_umul(m, TWO_OVER_PI[j + 1], h1, l1);
    dlc_umul(m, TWO_OVER_PI[j + 2], h2, l2);
    dlc_umul(m, TWO_OVER_PI[j + 3], h3, l3);
    // m times words j .. j+3, little-endian words p0 .. p4: (x 2/pi mod 4) 2^t, t below.
    uint p0 = l3, p1 = h3 + l2;
    uint c = p1 < l2 ? 1u : 0u;
    uint s = h2 + l1;
    uint c2 = s < l1 ? 1u : 0u;
    uint p2 = s + c;
    c = c2 + (p2 < s ? 1u : 0u);
    s = h1 + l0;
    c2 = s < l0 ? 1u : 0u;
    uint p3 = s + c;
    c = c2 + (p3 < s ? 1u : 0u);
    uint p4 = h0 + c;
    // The quadrant and the fraction are the bits from t - 64 up, in words w-2 .. w+1 of p (t in
    // 95 .. 152, w 2 to 4): selected, not indexed, so that no array goes to local memory.
    int t = 32 * (j + 4) - e;
    int w = t >> 5, sh = t & 31;
    uint a0 = w == 2 ? p0 : w == 3 ? p1 : p2;
    uint a1 = w == 2 ? p1 : w == 3 ? p2 : p3;
    uint a2 = w == 2 ? p2 : w == 3 ? p3 : p4;
    uint a3 = w == 2 ? p3 : w == 3 ? p4 : 0u;
    q = int(dlc_bits32(a3, a2, sh) & 3u);
    uint hi = dlc_bits32(a2, a1, sh), lo = dlc_bits32(a1, a0, sh);  // the fraction, 64 bits
    float sgn = 1.0;
    if (hi >= 0x80000000u) {  // fraction >= 1/2: r = (fraction - 1) pi/2, a quadrant up
        hi = ~hi;
        lo = ~lo + 1u;
        if (lo == 0u) hi += 1u;
        q = (q + 1) & 3;
        sgn = -1.0;
    }
    // Normalized (its leading 1 at the top of hi: n bits up), then fraction * pi/2 from 16-bit
    // pieces of it times pi/2 in 8, 8 and 24 bits (the large products exact), smallest first.
    int n = 0;
    if (hi == 0u) {  // below 2^-32 (no float's remainder is that close to a multiple of pi/2)
        hi = lo;
        lo = 0u;
        n = 32;
    }
    int z = (hi & 0xFFFF0000u) == 0u ? 16 : 0;
    z += ((hi << z) & 0xFF000000u) == 0u ? 8 : 0;
    z += ((hi << z) & 0xF0000000u) == 0u ? 4 : 0;
    z += ((hi << z) & 0xC0000000u) == 0u ? 2 : 0;
    z += ((hi << z) & 0x80000000u) == 0u ? 1 : 0;
    hi = (hi << z) | ((lo >> (31 - z)) >> 1);
    lo <<= z;
    n += z;
    float f1 = float(hi >> 16) * 1.52587890625e-05, f2 = float(hi & 0xFFFFu) * 2.3283064365386963e-10;
    float f3 = float(lo >> 16) * 3.552713678800501e-15;
    float r = (f1 * -6.397578431460715e-07 + f2 * 0.000484466552734375 + f3 * 1.5703125)
              + (f1 * 0.000484466552734375 + f2 * 1.5703125);
    return sgn * uintBitsToFloat(uint(127 - n) << 23) * (f1 * 1.5703125 + r);  // times 2^-n
}

// |x| = (4k + q) pi/2 + r with |r| <= pi/4, for finite x.
float dlc_trig_arg(float ax, out int q) {
    q = 0;
    return ax <= 0.7853981633974483 ? ax : dlc_trig_reduce(ax, q);
}

// Cephes' sinf and cosf polynomials, for |r| <= pi/4.
float dlc_sin_poly(float r) {
    float z = r * r;
    return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
}

float dlc_cos_poly(float r) {
    float z = r * r;
    return (((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z) + 1.0;
}

float dlc_sin(float x) {
    if (x == 0.0 || dlc_isnan(x)) return x;  // keeps -0
    if (abs(x) == DLC_INF) return DLC_NAN;
    int q;
    float r = dlc_trig_arg(abs(x), q);
    float s = (q & 1) == 0 ? dlc_sin_poly(r) : dlc_cos_poly(r);
    s = q >= 2 ? -s : s;
    return x < 0.0 ? -s : s;
}
"""
)

COS = """
float dlc_cos(float x) {
    if (dlc_isnan(x)) return x;
    if (abs(x) == DLC_INF) return DLC_NAN;
    int q;
    float r = dlc_trig_arg(abs(x), q);
    float c = (q & 1) == 0 ? dlc_cos_poly(r) : dlc_sin_poly(r);
    return (q == 1 || q == 2) ? -c : c;
}
"""

TAN = """
// tan by Cephes' tanf polynomial of the reduced argument (-1 / it in odd quadrants).
float dlc_tan(float x) {
    if (x == 0.0 || dlc_isnan(x)) return x;  // keeps -0
    if (abs(x) == DLC_INF) return DLC_NAN;
    int q;
    float r = dlc_trig_arg(abs(x), q);
    float z = r * r;
    float t = (((((9.38540185543e-3 * z + 3.11992232697e-3) * z + 2.44301354525e-2) * z + 5.34112807005e-2) * z
                + 1.33387994085e-1) * z + 3.33331568548e-1) * z * r + r;
    t = (q & 1) == 0 ? t : -1.0 / t;
    return x < 0.0 ? -t : t;
}
"""
