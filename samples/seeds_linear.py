"""The seeds' first training example, line by line: a [1, 3] multiplier learned with SGD.

    python samples/seeds_linear.py [--backend gl|numpy] [--seed S]

Graph, placeholders and a variable; a Session trained a batch at a time on feed entries from
shuffled input providers, printing each batch's average cost; then inference on [0.1, 0.2,
0.3] (the multiplier maps [1, 2, 3] to 4, so about 0.4).
"""

from __future__ import annotations

import argparse

import dlc


def main(backend: str | None, seed: int) -> None:
    g = dlc.Graph()

    # Placeholders are input containers. This is the container for where we will
    # feed an input array when we execute the graph.
    input_shape = [3]
    input_tensor = g.placeholder("input", input_shape)

    label_shape = [1]
    label_tensor = g.placeholder("label", label_shape)

    # Variables are containers that hold a value that can be updated from training.
    # Here we initialize the multiplier variable randomly.
    multiplier = g.variable("multiplier", dlc.randn([1, 3], seed=seed))

    # Top level graph methods take Tensors and return Tensors.
    output_tensor = g.matmul(multiplier, input_tensor)
    cost_tensor = g.mean_squared_cost(output_tensor, label_tensor)

    # Tensors, like arrays, have a shape attribute.
    print(list(output_tensor.shape))

    learning_rate = 0.00001
    batch_size = 3

    session = dlc.Session(g, backend=backend)
    optimizer = dlc.SGD(learning_rate)

    inputs = [dlc.array([1.0, 2.0, 3.0]), dlc.array([10.0, 20.0, 30.0]), dlc.array([100.0, 200.0, 300.0])]
    labels = [dlc.array([4.0]), dlc.array([40.0]), dlc.array([400.0])]

    # Shuffles inputs and labels and keeps them mutually in sync.
    shuffled_input_provider_builder = dlc.InCPUMemoryShuffledInputProviderBuilder([inputs, labels], seed=seed)
    input_provider, label_provider = shuffled_input_provider_builder.get_input_providers()

    # Maps tensors to input providers.
    feed_entries = [dlc.FeedEntry(input_tensor, input_provider), dlc.FeedEntry(label_tensor, label_provider)]

    num_batches = 10
    for i in range(num_batches):
        # Wrap session.train in a scope so temporaries get cleaned up automatically.
        with dlc.tidy():
            # Train takes a cost tensor to minimize. Trains one batch. Returns the average cost.
            cost = session.train(cost_tensor, feed_entries, batch_size, optimizer, dlc.CostReduction.MEAN)
            print(f"last average cost ({i}): {cost}")

    # After training, we can infer through the graph.
    with dlc.tidy():
        test_input = dlc.array([0.1, 0.2, 0.3])

        # session.eval can take arrays as input data.
        test_feed_entries = [dlc.FeedEntry(input_tensor, test_input)]
        test_output = session.eval(output_tensor, test_feed_entries)

        print("---inference output---")
        print(f"shape: {list(test_output.shape)}")
        print(f"value: {test_output.get(0)}")

    # Cleanup training data.
    for x in inputs + labels:
        x.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=["gl", "numpy"],
        default=None,
        help="where arrays live and the session runs (default: gl when available)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the multiplier's initial value and the shuffling")
    args = parser.parse_args()
    if args.backend:
        dlc.set_backend(args.backend)
    main(args.backend, args.seed)
