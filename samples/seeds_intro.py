"""The seeds' introduction, line by line: math on device arrays (deeplearn.js NDArrayMath).

    python samples/seeds_intro.py [--backend gl|numpy]

Prints the mean squared difference of two 2x2 matrices (1.5), then the guide's matrix times
vector read back without blocking, then the scopes example of the performance guide.
"""

from __future__ import annotations

import argparse
import asyncio

import numpy as np

import dlc


def mean_squared_difference() -> None:
    # Example of taking the mean squared difference between two matrices.
    with dlc.tidy():
        a = dlc.array(np.reshape([1.0, 2.0, 3.0, 4.0], [2, 2]))
        b = dlc.array(np.reshape([0.0, 2.0, 4.0, 6.0], [2, 2]))

        # Non-blocking math calls: the kernels run on the GPU, nothing is read back yet.
        diff = dlc.ops.sub(a, b)
        squared_diff = dlc.ops.elementwise_mul(diff, diff)
        total = dlc.ops.sum(squared_diff)
        size = dlc.array(a.size)
        average = dlc.ops.divide(total, size)

        # Blocking call to actually read the values from average.
        print("mean squared difference: " + str(average.get()))


async def matrix_times_vector() -> None:
    with dlc.tidy():
        matrix_shape = [2, 3]  # 2 rows, 3 columns.
        matrix = dlc.array(np.reshape([10, 20, 30, 40, 50, 60], matrix_shape))
        vector = dlc.array([0, 1, 2])
        result = dlc.ops.matrix_times_vector(matrix, vector)

        print("result shape:", list(result.shape))
        print("result", (await result.data()).tolist())  # read without blocking the thread


def scopes() -> None:
    output = None
    with dlc.tidy():
        a = dlc.array(2.0)  # tracked: every array made in a scope is
        c = a.exp().neg()  # outputs of ops are tracked too

        @dlc.tidy
        def inner():
            e = dlc.array(3.0)  # disposed when inner() returns
            return e * e  # returned: moves to the enclosing scope

        d = inner()
        output = dlc.keep(d.tanh())  # kept: survives the scope; ours to dispose
    print(
        "after the scope: a, c, d disposed:",
        a.is_disposed and c.is_disposed and d.is_disposed,
        "; output kept:",
        round(output.get(), 6),
    )
    output.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=["gl", "numpy"],
        default=None,
        help="where arrays live (default: gl when an OpenGL context can be made)",
    )
    args = parser.parse_args()
    if args.backend:
        dlc.set_backend(args.backend)
    mean_squared_difference()
    asyncio.run(matrix_times_vector())
    scopes()
    print("arrays live at the end:", dlc.memory().arrays)
