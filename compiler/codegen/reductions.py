"""What every reduce template shares (kernels_reduce, kernels_reduce_rows, the texture
target's): each op's identity, how a candidate beats the best so far, and the factors of a
sum's scaled path (a sum that overflowed is summed again, each term times 2^-32)."""

INIT = {"sum": "0.0", "max": "(-DLC_INF)", "min": "DLC_INF", "argmax": "(-DLC_INF)", "argmin": "DLC_INF"}
BETTER = {"max": ">", "min": "<", "argmax": ">", "argmin": "<"}
DOWN, UP = "2.3283064365386963e-10", "4294967296.0"  # 2^-32 and 2^32
