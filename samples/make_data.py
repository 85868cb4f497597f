"""Writes samples/data/ once (the files are committed; this records how).

digits_train.npz / digits_test.npz: the 1797 8x8 handwritten digits that
scikit-learn ships (sklearn.datasets.load_digits), split 1437/360 by a fixed
permutation. quadratic.npz: noisy samples of 3x^2 + 2x + 1. linear.csv: the
seeds' three examples.
"""

from pathlib import Path

import numpy as np

out = Path(__file__).parent / "data"
out.mkdir(exist_ok=True)

from sklearn.datasets import load_digits  # noqa: E402  (only needed to regenerate)

digits = load_digits()
order = np.random.default_rng(0).permutation(len(digits.target))
pixels = digits.data[order].astype(np.float32)
labels = digits.target[order].astype(np.int64)
np.savez_compressed(out / "digits_train.npz", pixels=pixels[:1437], labels=labels[:1437])
np.savez_compressed(out / "digits_test.npz", pixels=pixels[1437:], labels=labels[1437:])

rng = np.random.default_rng(1)
x = rng.uniform(-2, 2, 200).astype(np.float32)
y = (3 * x**2 + 2 * x + 1 + rng.normal(0, 0.1, x.shape)).astype(np.float32)
np.savez(out / "quadratic.npz", x=x, y_label=y)

(out / "linear.csv").write_text("x.0,x.1,x.2,label\n1,2,3,4\n10,20,30,40\n100,200,300,400\n")
