"""Writes samples/data/ once (the files are committed; this records how).

digits_train.npz / digits_test.npz: the 1797 8x8 handwritten digits that
scikit-learn ships (sklearn.datasets.load_digits), split 1437/360 by a fixed
permutation. quadratic.npz: noisy samples of 3x^2 + 2x + 1. linear.csv: the
seeds' three examples. sequences.npz: random sequences whose label is their first number
(lstm.dl).

`python samples/make_data.py` writes them all; `python samples/make_data.py sequences`
writes only the files named (digits needs scikit-learn, the others only NumPy).
"""

import sys
from pathlib import Path

import numpy as np

out = Path(__file__).parent / "data"
out.mkdir(exist_ok=True)


def sequences():
    """256 sequences of 8 steps of 2 numbers (standard normal); y [256, 1] is each one's
    first number: an LSTM has to carry it through the other 7 steps."""
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (256, 8, 2)).astype(np.float32)
    np.savez(out / "sequences.npz", x=x, y=x[:, 0, :1].copy())


def digits():
    from sklearn.datasets import load_digits  # only needed to regenerate

    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))
    pixels = data.data[order].astype(np.float32)
    labels = data.target[order].astype(np.int64)
    np.savez_compressed(out / "digits_train.npz", pixels=pixels[:1437], labels=labels[:1437])
    np.savez_compressed(out / "digits_test.npz", pixels=pixels[1437:], labels=labels[1437:])


def quadratic():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, 200).astype(np.float32)
    y = (3 * x**2 + 2 * x + 1 + rng.normal(0, 0.1, x.shape)).astype(np.float32)
    np.savez(out / "quadratic.npz", x=x, y_label=y)


def linear():
    (out / "linear.csv").write_text("x.0,x.1,x.2,label\n1,2,3,4\n10,20,30,40\n100,200,300,400\n")


MAKERS = {"digits": digits, "quadratic": quadratic, "linear": linear, "sequences": sequences}

if __name__ == "__main__":
    for name in sys.argv[1:] or MAKERS:
        MAKERS[name]()
