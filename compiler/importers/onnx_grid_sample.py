"""ONNX's GridSample (opset 16 and 20) over [N, C, H, W]: the input sampled at run-time
coordinates, written with `gather`.

Each output position's grid (x, y) in [-1, 1] becomes pixel coordinates (align_corners or
not); nearest rounds them half to even; a coordinate outside the image is clamped (border)
or reflected (reflection) as ONNX's reference does. Then each tap (1 for nearest, 2 x 2
bilinear, 4 x 4 bicubic with Keys' a = -0.75) gathers the pixel's channels from the input
held as [N * H * W, C] rows, weighted; a tap outside the image reads 0 (zeros), its
clamped pixel (border) or its reflection (reflection).
"""

from __future__ import annotations

from .onnx_converter import fmt_num, fmt_shape
from .onnx_ops import _out_shape, handler

MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
A = -0.75  # the cubic convolution's a


def _text(v, default: str) -> str:
    return default if v is None else (v.decode() if isinstance(v, bytes) else v)


def _reflect(v: str, lo: float, hi: float) -> str:
    """v reflected by the near border until it lies in [lo, hi] (ONNX's _gs_reflect)."""
    rng = fmt_num(hi - lo)
    lo_s, hi_s = fmt_num(lo), fmt_num(hi)
    below = f"({lo_s} - {v})"
    above = f"({v} - {hi_s})"

    def fold(dx: str, even: str, odd: str) -> str:
        n = f"floor({dx} / {rng})"
        r = f"({dx} - {n} * {rng})"
        return f"where(eq(mod({n}, 2.0), 0.0), {even.format(r=r)}, {odd.format(r=r)})"

    low = fold(below, f"{lo_s} + {{r}}", f"{hi_s} - {{r}}")
    high = fold(above, f"{hi_s} - {{r}}", f"{lo_s} + {{r}}")
    return f"where(lt({v}, {lo_s}), {low}, where(gt({v}, {hi_s}), {high}, {v}))"


def _cubic_weights(t: str) -> list[str]:
    a = fmt_num(A)
    return [
        f"((({a} * ({t} + 1.0) - 5.0 * {a}) * ({t} + 1.0) + 8.0 * {a}) * ({t} + 1.0) - 4.0 * {a})",
        f"(((({a} + 2.0) * {t} - ({a} + 3.0)) * {t} * {t}) + 1.0)",
        f"(((({a} + 2.0) * (1.0 - {t}) - ({a} + 3.0)) * (1.0 - {t}) * (1.0 - {t})) + 1.0)",
        f"((({a} * (2.0 - {t}) - 5.0 * {a}) * (2.0 - {t}) + 8.0 * {a}) * (2.0 - {t}) - 4.0 * {a})",
    ]


@handler("GridSample")
def _grid_sample(c, node, ins, attrs):
    x, grid = ins
    out = node.output[0]
    if x.rank != 4 or any(isinstance(d, str) for d in x.shape[1:]):
        raise c.fail(f"GridSample over [N, C, H, W] with C, H, W known is supported, got {fmt_shape(x.shape)}")
    mode = MODES.get(_text(attrs.get("mode"), "bilinear" if c.opset < 20 else "linear"))
    padding = _text(attrs.get("padding_mode"), "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise c.fail(f"GridSample mode {attrs.get('mode')} / padding_mode {padding} is not supported")
    align = bool(attrs.get("align_corners", 0))
    n, ch, h, w = x.shape
    _, ho, wo, _ = grid.shape
    g = c.data(grid)
    coords = {}
    for k, (axis, size) in enumerate((("x", w), ("y", h))):
        v = c.temp(f"{out}_g{axis}", f"reshape(slice({g}, [0, 0, 0, {k}], [-1, -1, -1, 1]), {fmt_shape([n, ho, wo])})")
        if align:
            v = f"({v} + 1.0) / 2.0 * {fmt_num(size - 1)}"
        else:
            v = f"(({v} + 1.0) * {fmt_num(size)} - 1.0) / 2.0"
        v = c.temp(f"{out}_{axis}", v)
        if mode == "nearest":
            v = c.temp(f"{out}_{axis}_round", f"round({v})")
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            v = c.temp(f"{out}_{axis}_in", f"where(logical_or(lt({v}, {fmt_num(lo)}), gt({v}, {fmt_num(hi)})), "
                       f"clip({v}, 0.0, {fmt_num(size - 1)}), {v})")  # fmt: skip
        elif padding == "reflection":
            v = c.temp(f"{out}_{axis}_in", _reflect(v, lo, hi))
        coords[axis] = (v, size, lo, hi)
    # the taps along each axis: (index, weight or None)
    taps = {}
    for axis, (v, *_) in coords.items():
        if mode == "nearest":
            taps[axis] = [(v, None)]
            continue
        base = c.temp(f"{out}_{axis}_floor", f"floor({v})")
        t = c.temp(f"{out}_{axis}_t", f"{v} - {base}")
        if mode == "linear":
            taps[axis] = [(base, f"(1.0 - {t})"), (f"({base} + 1.0)", t)]
        else:
            ws = _cubic_weights(t)
            taps[axis] = [(f"({base} + {fmt_num(float(k - 1))})", ws[k]) for k in range(4)]
    # each axis's taps as (the pixel index read, its 0/1 validity or None, its weight or None)
    reads = {
        axis: [(*_pixel_index(c, f"{out}_{axis}{k}", i, coords[axis], padding), wt) for k, (i, wt) in enumerate(ts)]
        for axis, ts in taps.items()
    }
    table = c.temp(out + "_rows", f"reshape(transpose({c.data(x)}, perm=[0, 2, 3, 1]), [-1, {ch}])")
    batch = c.temp(out + "_batch", f"reshape(arange({n}), {fmt_shape([n, 1, 1])}) * {fmt_num(h * w)}")
    column = fmt_shape([n, ho, wo, 1])  # a per-position value against the channels
    terms = []
    for ky, (iy, valid_y, wy) in enumerate(reads["y"]):
        for kx, (ix, valid_x, wx) in enumerate(reads["x"]):
            name = f"{out}_tap{ky}{kx}"
            row = c.temp(name + "_row", f"int({batch} + {iy} * {fmt_num(w)} + {ix})")
            px = f"gather({table}, {row}, axis=0)"
            valid = [m for m in (valid_y, valid_x) if m]
            if valid:
                both = valid[0] if len(valid) == 1 else f"logical_and({valid[0]}, {valid[1]})"
                px = f"where(reshape({both}, {column}), {px}, 0.0)"
            weight = [m for m in (wy, wx) if m]
            if weight:
                px = f"{px} * reshape({' * '.join(weight)}, {column})"
            terms.append(c.temp(name, px))
    y = c.temp(out + "_nhwc", " + ".join(terms))
    c.emit(out, f"transpose({y}, perm=[0, 3, 1, 2])", _out_shape(c, out, (n, ch, ho, wo)))


def _pixel_index(c, name: str, i: str, coord, padding: str) -> tuple[str, str | None]:
    """(the pixel index to read, a 0/1 validity or None) for a tap index along one axis."""
    _, size, lo, hi = coord
    top = fmt_num(size - 1)
    if padding == "zeros":
        valid = c.temp(f"{name}_ok", f"logical_and(ge({i}, 0.0), le({i}, {top}))")
        return c.temp(f"{name}_at", f"clip({i}, 0.0, {top})"), valid
    if padding == "border":
        return c.temp(f"{name}_at", f"clip({i}, 0.0, {top})"), None
    reflected = _reflect(i, lo, hi)
    return c.temp(f"{name}_at", f"clip(float(int({reflected})), 0.0, {top})"), None  # int(): toward zero
