"""The seeds' (deeplearn.js) camelCase op names and what dlc calls them, for suggestions.

`suggest(name, known)` is the hint an "unknown function" error ends with: the dlc name of
a seeds name (`matrixTimesVector` -> `matmul`), else the closest known name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dlc.runtime.errors import did_you_mean

# Every op-like camelCase name the seeds use (NDArrayMath, Graph, the tutorials), with the
# dlc function or expression that does it.
SEED_NAMES: dict[str, str] = {
    "matrixTimesVector": "matmul",
    "vectorTimesMatrix": "matmul",
    "matrixTimesMatrix": "matmul",
    "dotProduct": "matmul",
    "outerProduct": "matmul",
    "elementWiseMul": "mul",
    "elementWiseMulBroadcast": "mul",
    "scalarTimesArray": "mul",
    "arrayDividedByScalar": "div",
    "scalarDividedByArray": "div",
    "scalarMinusArray": "sub",
    "arrayMinusScalar": "sub",
    "scalarPlusArray": "add",
    "addStrict": "add",
    "subStrict": "sub",
    "multiplyStrict": "mul",
    "scaledArrayAdd": "add",
    "squaredDiff": "square",
    "meanSquaredCost": "mean_squared",
    "softmaxCrossEntropyCost": "softmax_cross_entropy",
    "sigmoidCrossEntropyCost": "sigmoid_cross_entropy",
    "leakyRelu": "leaky_relu",
    "logSumExp": "logsumexp",
    "logSoftmax": "log_softmax",
    "oneHot": "one_hot",
    "maxPool": "max_pool",
    "avgPool": "avg_pool",
    "switchDim": "transpose",
    "reduceSum": "sum",
    "argMax": "argmax",
    "argMin": "argmin",
    "argmaxEquals": "eq",
}

# How to write the seeds' op when it is an expression rather than one function.
_HOW = {
    "squaredDiff": "square(a - b)",
    "scaledArrayAdd": "c1 * a + c2 * b",
    "argmaxEquals": "argmax(a) == argmax(b)",
    "addStrict": "a + b",
    "subStrict": "a - b",
    "multiplyStrict": "a * b",
    "elementWiseMul": "a * b",
}


def snake_case(name: str) -> str:
    """matrixTimesVector -> matrix_times_vector."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def suggest(name: str, known: Iterable[str]) -> str:
    """ ", did you mean 'matmul'?" (or an expression) for a seeds name, else the closest name."""
    known = list(known)
    target = SEED_NAMES.get(name)
    if target is None and snake_case(name) in known:
        target = snake_case(name)
    if target is not None and target in known:
        how = _HOW.get(name)
        return f", did you mean '{target}'?" + (f" (the seeds' {name}: {how})" if how else "")
    return did_you_mean(name, known)
