"""Text data (dlc/text.py): the character vocabulary, the split, the windows, and the
vocabulary file read as untrusted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlc.errors import DataError
from dlc.text import TextData, Vocab, vocab_path

TEXT = "To be, or not to be, that is the question:\n" * 20


def test_vocab_round_trip_and_order(tmp_path):
    v = Vocab.of(TEXT)
    assert v.chars == sorted(set(TEXT))
    assert v.decode(v.encode(TEXT)) == TEXT
    v.save(tmp_path / "w.vocab.json")
    assert Vocab.load(tmp_path / "w.vocab.json").chars == v.chars
    with pytest.raises(DataError, match=r"'Z' at position 3 is not in the model's vocabulary"):
        v.encode("To Z")
    with pytest.raises(DataError, match="outside the vocabulary"):
        v.decode([v.size])


def test_windows_are_shifted_by_one_and_drawn_from_the_training_part():
    data = TextData("t.txt", block=7, text=TEXT)
    assert len(data.train_ids) + len(data.val_ids) == len(TEXT)
    assert len(data.val_ids) == int(len(TEXT) * 0.1)
    b = data.batch(5, np.random.default_rng(0))
    assert b["tokens"].shape == b["targets"].shape == (5, 7) and b["tokens"].dtype == np.int32
    np.testing.assert_array_equal(b["tokens"][:, 1:], b["targets"][:, :-1])
    train = data.vocab.decode(data.train_ids)
    for row in range(5):  # each window is a run of the training text
        assert data.vocab.decode(b["tokens"][row]) + data.vocab.decode(b["targets"][row][-1:]) in train
    same = data.batch(5, np.random.default_rng(0))
    np.testing.assert_array_equal(same["tokens"], b["tokens"])
    val = data.val.batch(3, np.random.default_rng(1))
    assert data.vocab.decode(val["tokens"][0]) in data.vocab.decode(data.val_ids)


def test_bad_text_and_vocab_files(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nbut \xff here")
    with pytest.raises(DataError, match=r"bad.txt:2:5: not UTF-8 text \(byte 0xff\)"):
        TextData(bad, block=2)
    with pytest.raises(DataError, match="fewer than a window"):
        TextData("t.txt", block=100, text="short text")
    for content, problem in [
        ("[]", "not a dlc character vocabulary"),
        ('{"format": "dlc-vocab", "kind": "chars", "chars": ["ab"]}', "one character"),
        ('{"format": "dlc-vocab", "kind": "chars", "chars": ["a", "a"]}', "twice"),
        ("{not json", "not a vocabulary file"),
    ]:
        f = tmp_path / "v.vocab.json"
        f.write_text(content)
        with pytest.raises(DataError, match=problem):
            Vocab.load(f)
    assert json.loads((lambda p: (Vocab(["a"]).save(p), p.read_text())[1])(tmp_path / "a.json"))["chars"] == ["a"]
    assert vocab_path("runs/w.npz").name == "w.vocab.json"
