"""ONNX's LSTM and GRU as a `.dl` loop over the time steps (the sequence length must be
known at import; the batch may be symbolic).

Each step is the cell written out with matmuls, `split` into gates and the default
activations (sigmoid, tanh); the step's hidden state is named `<Y>.{t}` and Y stacks them.
W and R are stored transposed (`[input, gates]`, the layout matmul reads) under their ONNX
names, and B's two halves stay two params (`_wb`, `_rb`), so Adam steps on them as
PyTorch steps on bias_ih and bias_hh. Forward, reverse and bidirectional; layout 0 and 1.
"""

from __future__ import annotations

import numpy as np

from .onnx_converter import fmt_list, fmt_shape
from .onnx_ops import _attrs, _out_shape, handler

GATES = {"LSTM": 4, "GRU": 3}
LOCALS = ("xt", "i", "o", "f", "cc", "xz", "xr", "xn", "hz", "hr", "hn", "z", "r", "n")  # a step's tensors


def _check(c, node, attrs, x_shape, ins):
    if attrs.get("activations") and [a.decode() if isinstance(a, bytes) else a for a in attrs["activations"]] != (
        ["Sigmoid", "Tanh", "Tanh"] if node.op_type == "LSTM" else ["Sigmoid", "Tanh"]
    ) * (2 if attrs.get("direction", b"forward") in (b"bidirectional", "bidirectional") else 1):
        raise c.fail(f"{node.op_type} with activations {attrs['activations']} is not supported (the defaults are)")
    if attrs.get("clip") is not None:
        raise c.fail(f"{node.op_type} with clip is not supported")
    if node.op_type == "LSTM" and attrs.get("input_forget", 0):
        raise c.fail("LSTM with input_forget=1 is not supported")
    if len(ins) > 4 and ins[4] is not None:
        raise c.fail(f"{node.op_type}'s sequence_lens is not supported (every sequence is whole)")
    if node.op_type == "LSTM" and len(ins) > 7 and ins[7] is not None:
        raise c.fail("LSTM's peepholes (P) are not supported")
    steps = x_shape[0]
    if isinstance(steps, str):
        raise c.fail(f"{node.op_type} over a symbolic sequence length ({steps}) is not supported")
    return steps


@handler("LSTM", "GRU")
def _rnn(c, node, ins, attrs):
    op = node.op_type
    layout = attrs.get("layout", 0)
    x = ins[0]
    xs = c.data(x)
    if layout:  # [B, T, I] -> [T, B, I]
        xs = c.temp(node.output[0] + "_tbi", f"transpose({xs}, perm=[1, 0, 2])")
        x_shape = (x.shape[1], x.shape[0], x.shape[2])
    else:
        x_shape = tuple(x.shape)
    steps = _check(c, node, attrs, x_shape, ins)
    batch, size = x_shape[1], x_shape[2]
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    hidden = attrs.get("hidden_size") or ins[2].const.shape[-1]
    g = GATES[op]
    base = node.output[0] or node.output[1] or node.name
    w, r = ins[1], ins[2]
    b = ins[3] if len(ins) > 3 else None
    h0 = ins[5] if len(ins) > 5 else None
    c0 = ins[6] if op == "LSTM" and len(ins) > 6 else None
    ys, hs, cs = [], [], []
    for d, way in enumerate(dirs):
        tag = f"{base}_{way}"
        suffix = str(d) if len(dirs) > 1 else ""
        wt = _transposed(c, w, d, suffix)
        rt = _transposed(c, r, d, suffix)
        wb, rb = _bias_halves(c, b, d, suffix, g * hidden, tag)
        state = f"[{batch}, {hidden}]"
        h = _initial(c, h0, d, f"{tag}_h", state)
        cell = _initial(c, c0, d, f"{tag}_c", state) if op == "LSTM" else None
        loop_h = c.names.new(f"{tag}_ht")
        loop_c = c.names.new(f"{tag}_ct") if op == "LSTM" else None
        c.lines.append(f"{loop_h} = {h}")
        if op == "LSTM":
            c.lines.append(f"{loop_c} = {cell}")
        y = c.names.new(f"{tag}_y")
        n = {k: c.names.new(f"{tag}_{k}") for k in LOCALS}
        t_expr = "t" if way == "forward" else f"{steps - 1} - t"
        body = [f"{n['xt']} = reshape(slice({xs}, [{t_expr}, 0, 0], [1, -1, -1]), [{batch}, {size}])"]
        gates = f"{n['xt']} @ {wt} + {wb}"
        if op == "LSTM":
            body += [
                f"{n['i']}, {n['o']}, {n['f']}, {n['cc']} = "
                f"split({gates} + {loop_h} @ {rt} + {rb}, {fmt_list([hidden] * 4)}, axis=-1)",
                f"{loop_c} = sigmoid({n['f']}) * {loop_c} + sigmoid({n['i']}) * tanh({n['cc']})",
                f"{loop_h} = sigmoid({n['o']}) * tanh({loop_c})",
            ]
        else:
            sizes = fmt_list([hidden] * 3)
            body += [
                f"{n['xz']}, {n['xr']}, {n['xn']} = split({gates}, {sizes}, axis=-1)",
                f"{n['hz']}, {n['hr']}, {n['hn']} = split({loop_h} @ {rt} + {rb}, {sizes}, axis=-1)",
                f"{n['z']} = sigmoid({n['xz']} + {n['hz']})",
                f"{n['r']} = sigmoid({n['xr']} + {n['hr']})",
            ]
            if attrs.get("linear_before_reset", 0):
                body.append(f"{n['n']} = tanh({n['xn']} + {n['r']} * {n['hn']})")
            else:  # the reset gate before R: (r * h) @ Rn + Rbn
                rn, rbn = _gru_candidate(c, rt, rb, hidden, tag)
                body.append(f"{n['n']} = tanh({n['xn']} + ({n['r']} * {loop_h}) @ {rn} + {rbn})")
            body.append(f"{loop_h} = (1.0 - {n['z']}) * {n['n']} + {n['z']} * {loop_h}")
        body.append(f"{y}.{{t}} = {loop_h}")
        c.lines.append(f"for t in range({steps}) {{")
        c.lines.extend("    " + line for line in body)
        c.lines.append("}")
        order = range(steps) if way == "forward" else reversed(range(steps))
        ys.append(f"stack([{', '.join(f'{y}.{t}' for t in order)}], axis=0)")
        hs.append(loop_h)
        cs.append(loop_c)
    _outputs(c, node, ys, hs, cs, (steps, len(dirs), batch, hidden))


def _transposed(c, v, d: int, suffix: str) -> str:
    """Direction d of W or R ([dirs, gates, size]) as [size, gates]: an initializer stored so
    under its ONNX name; one the model computes (an export without constant folding
    reorders PyTorch's gates at run time) transposed in the .dl."""
    if v.const is not None:
        return c.declare_const(f"{v.onnx_name}.{suffix}" if suffix else v.onnx_name, v.const[d].T, v.param)
    rows, cols = v.shape[1], v.shape[2]
    x = c.data(v)
    return c.temp(
        f"{v.onnx_name}_t{suffix}", f"transpose(reshape(slice({x}, [{d}, 0, 0], [1, -1, -1]), [{rows}, {cols}]))"
    )


def _bias_halves(c, b, d: int, suffix: str, n: int, tag: str) -> tuple[str, str]:
    """B's input and recurrent halves for direction d (zeros when B is omitted)."""
    if b is None:
        zeros = c.declare_const(tag + "_b", np.zeros(n, np.float32), False)
        return zeros, zeros
    if b.const is not None:
        bias = b.const[d]
        return (
            c.declare_const(f"{b.onnx_name}_wb{suffix}", bias[:n], b.param),
            c.declare_const(f"{b.onnx_name}_rb{suffix}", bias[n:], b.param),
        )
    row = c.temp(f"{b.onnx_name}_{d}", f"reshape(slice({c.data(b)}, [{d}, 0], [1, -1]), [{2 * n}])")
    return (
        c.temp(f"{b.onnx_name}_wb{suffix}", f"slice({row}, [0], [{n}])"),
        c.temp(f"{b.onnx_name}_rb{suffix}", f"slice({row}, [{n}], [{n}])"),
    )


def _gru_candidate(c, rt, rb, hidden, tag):
    """Rn and Rbn, the candidate gate's part of R^T and of R's bias, as slices (so the
    params stay whole and train as one)."""
    rn = c.temp(f"{tag}_rn", f"slice({rt}, [0, {2 * hidden}], [-1, {hidden}])")
    rbn = c.temp(f"{tag}_rbn", f"slice({rb}, [{2 * hidden}], [{hidden}])")
    return rn, rbn


def _initial(c, v, d, name, state):
    if v is None:
        return f"zeros({state})"
    return c.temp(name + "0", f"reshape(slice({c.data(v)}, [{d}, 0, 0], [1, -1, -1]), {state})")


def _outputs(c, node, ys, hs, cs, shape):
    steps, dirs, batch, hidden = shape
    layout = _attrs(node).get("layout", 0)
    outs = list(node.output) + [""] * 3
    if outs[0]:
        per_dir = [f"reshape({s}, [{steps}, 1, {batch}, {hidden}])" for s in ys]
        y = ys[0] if dirs == 1 else f"concat([{', '.join(per_dir)}], axis=1)"
        full = (steps, dirs, batch, hidden)
        expr = f"reshape({y}, {fmt_shape(full)})"
        if layout:  # [B, T, dirs, H]
            full = (batch, steps, dirs, hidden)
            expr = f"transpose({expr}, perm=[2, 0, 1, 3])"
        c.emit(outs[0], expr, _out_shape(c, outs[0], full))
    for o, states in ((outs[1], hs), (outs[2], cs)):
        if o and states and states[0] is not None:
            state = (dirs, batch, hidden) if not layout else (batch, dirs, hidden)
            expr = f"stack([{', '.join(states)}], axis={1 if layout else 0})"
            c.emit(o, expr, _out_shape(c, o, state))
