"""samples/cnn_digits.dl trains on GL to at least 97% test accuracy (the issue's bar)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

pytestmark = pytest.mark.gl


def test_cnn_digits_reaches_97_percent_on_gl(gl):
    train = dict(np.load("samples/data/digits_train.npz"))
    test = dict(np.load("samples/data/digits_test.npz"))
    sess = dlc.Session("samples/cnn_digits.dl", backend="gl", seed=0)
    assert sess.eval("accuracy", test) < 0.5  # untrained: the bar is reached by training
    sess.train(train, optimizer=dlc.Adam(0.01), batch_size=64, epochs=8)
    assert sess.eval("accuracy", test) >= 0.97
