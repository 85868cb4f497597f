"""The seeds' guide for non-ML experts, line by line: y = a*x^2 + b*x + c learned from 4 points.

    python samples/seeds_quadratic.py [--backend gl|numpy] [--seed S]

Prints the (random) result for x = 4 before training, the average cost of each batch, and the
result after training, which should be about 57.0 (the data follow a = 3, b = 2, c = 1 with
noise; the values of xs and ys are the original tutorial's).
"""

from __future__ import annotations

import argparse
import asyncio
import random

import dlc


async def main(backend: str | None, seed: int) -> None:
    rnd = random.Random(seed)
    graph = dlc.Graph()
    # Make a new input in the graph, called 'x', with shape [] (a scalar).
    x = graph.placeholder("x", [])
    # Make new variables in the graph, 'a', 'b', 'c' with shape [] and random initial values.
    a = graph.variable("a", dlc.array(rnd.random()))
    b = graph.variable("b", dlc.array(rnd.random()))
    c = graph.variable("c", dlc.array(rnd.random()))
    # Make new tensors representing the output of the operations of the quadratic.
    order2 = graph.multiply(a, graph.square(x))
    order1 = graph.multiply(b, x)
    y = graph.add(graph.add(order2, order1), c)

    # When training, we need to provide a label and a cost function.
    y_label = graph.placeholder("y label", [])
    # Provide a mean squared cost function for training. cost = (y - y_label)^2
    cost = graph.mean_squared_cost(y, y_label)

    # At this point the graph is set up, but has not yet been evaluated.
    # dlc needs a Session object to evaluate a graph.
    session = dlc.Session(graph, backend=backend)

    with dlc.tidy():
        # Inference: ask the graph for y given x = 4. a, b and c are random, so is this.
        result = session.eval(y, [dlc.FeedEntry(x, dlc.array(4))])
        print("result", float(await result.data()))

        # Training: learn the coefficients of the quadratic from some data, for values
        # a = 3, b = 2, c = 1 with random noise added to the output.
        xs = [dlc.array(0), dlc.array(1), dlc.array(2), dlc.array(3)]
        ys = [dlc.array(1.1), dlc.array(5.9), dlc.array(16.8), dlc.array(33.9)]
        # When training, it's important to shuffle your data!
        shuffled_input_provider_builder = dlc.InCPUMemoryShuffledInputProviderBuilder([xs, ys], seed=seed)
        x_provider, y_provider = shuffled_input_provider_builder.get_input_providers()

        # Training is broken up into batches.
        num_batches = 20
        batch_size = len(xs)
        # The optimizer updates the weights; the learning rate is how large a step it makes.
        learning_rate = 0.01
        optimizer = dlc.SGD(learning_rate)
        for _ in range(num_batches):
            # Train takes a cost tensor to minimize; this call trains one batch and returns
            # the average cost of the batch.
            cost_value = session.train(
                cost,
                [dlc.FeedEntry(x, x_provider), dlc.FeedEntry(y_label, y_provider)],
                batch_size,
                optimizer,
                dlc.CostReduction.MEAN,
            )
            print("average cost: " + str(cost_value))

        # Now print the value from the trained model for x = 4, should be ~57.0.
        result = session.eval(y, [dlc.FeedEntry(x, dlc.array(4))])
        print("result should be ~57.0:")
        print(float(await result.data()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=["gl", "numpy"],
        default=None,
        help="where arrays live and the session runs (default: gl when available)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the initial a, b, c and the shuffling")
    args = parser.parse_args()
    if args.backend:
        dlc.set_backend(args.backend)
    asyncio.run(main(args.backend, args.seed))
