"""The language's front ends of the norm primitives (ops/norm.py): layer_norm and rms_norm, as
PyTorch's LayerNorm and RMSNorm compute them, over the trailing axes `axis` names, with gamma
and beta shaped like those axes. They check the arguments (located errors) and add one node.
"""

from __future__ import annotations

from .builder import GraphBuilder
from .functions import T, _axes, _fail, function
from .opdefs import Param
from .shapes import format_shape


def _normalized_axes(b: GraphBuilder, loc, name: str, x: int, axis, params: dict) -> tuple[int, ...]:
    """The axes normalized over (they must be the trailing ones, as in PyTorch), checked
    against the shape of each of `params` (gamma, beta)."""
    shape = b.shape(x)
    axes = _axes(b, loc, x, axis)
    if not axes or axes != tuple(range(len(shape) - len(axes), len(shape))):
        _fail(f"{name} normalizes over trailing axes of {format_shape(shape)}, got axis {axis}", loc)
    want = tuple(shape[a] for a in axes)
    for pname, p in params.items():
        if tuple(b.shape(p)) != want:
            _fail(
                f"{name} {pname} must have the shape of the normalized axes {format_shape(want)}, "
                f"got {format_shape(b.shape(p))}",
                loc,
            )
    return axes


def _eps(eps, name: str, loc) -> float:
    if not eps >= 0:
        _fail(f"{name} eps must be >= 0, got {eps}", loc)
    return float(eps)


@function(
    "layer_norm",
    Param("x", T),
    Param("gamma", T),
    Param("beta", T),
    Param("axis", "axis", -1),
    Param("eps", "float", 1e-5),
    doc="(x - mean) / sqrt(var + eps) * gamma + beta over the trailing axes (PyTorch's LayerNorm)",
    group="networks",
)
def layer_norm(b, loc, x, gamma, beta, axis, eps):
    axes = _normalized_axes(b, loc, "layer_norm", x, axis, {"gamma": gamma, "beta": beta})
    return b.add("layer_norm", [x, gamma, beta], loc, axes=axes, eps=_eps(eps, "layer_norm", loc))


@function(
    "rms_norm",
    Param("x", T),
    Param("gamma", T),
    Param("axis", "axis", -1),
    Param("eps", "float", 1e-6),
    doc="x / sqrt(mean(x^2) + eps) * gamma over the trailing axes (PyTorch's RMSNorm)",
    group="networks",
)
def rms_norm(b, loc, x, gamma, axis, eps):
    axes = _normalized_axes(b, loc, "rms_norm", x, axis, {"gamma": gamma})
    return b.add("rms_norm", [x, gamma], loc, axes=axes, eps=_eps(eps, "rms_norm", loc))
