"""Text data (dlc/text.py): the character vocabulary, the split, the windows, and the
vocabulary file read as untrusted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlc.runtime.errors import DataError
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


BIGRAM = """
input tokens: i32[B, T]
input targets: i32[B, T]
param W: [76, 76] = zeros
logits = gather(W, tokens)
loss cost = softmax_cross_entropy(logits, targets)
"""
CORPUS = "samples/data/shakespeare.txt"


def _dlc(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "dlc", *args], capture_output=True, text=True, timeout=300)


def test_train_on_text_then_generate_from_the_command_line(tmp_path):
    model = tmp_path / "bigram.dl"
    model.write_text(BIGRAM)
    w = tmp_path / "bg.npz"
    common = ["--backend", "numpy"]
    done = _dlc("train", str(model), "--data", CORPUS, "--block", "16", "--steps", "150", "--batch-size", "32",
                "--optimizer", "adam", "--lr", "0.1", "--save", str(w), *common)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "val (the last 10%)" in done.stdout
    final = float(done.stdout.split("-> ")[1].split()[0])
    assert final < 2.8  # from ln(76) = 4.33: a bigram model of English letters is about 2.5
    assert json.loads((tmp_path / "bg.vocab.json").read_text())["block"] == 16
    runs = [_dlc("generate", str(model), "--weights", str(w), "--prompt", "ROMEO:", "--tokens", "40",
                 "--top-k", "5", "--seed", str(s), *common) for s in (1, 1, 2)]  # fmt: skip
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout != runs[2].stdout
    assert runs[0].stdout.startswith("ROMEO:") and len(runs[0].stdout.rstrip("\n")) >= 46
    bad = _dlc("train", str(model), "--data", CORPUS, "--block", "16", "--epochs", "1", *common)
    assert bad.returncode == 2 and "give --steps N" in bad.stderr


def test_session_trains_on_text_and_generates_the_same_on_gl_and_numpy(tmp_path):
    import dlc

    data = TextData(CORPUS, block=8)
    texts = []
    for backend in ("numpy", "gl"):
        if backend == "gl":
            from dlc.runtime.device import get_context

            try:
                get_context()
            except dlc.RuntimeFailure as exc:
                pytest.skip(f"no OpenGL context: {exc}")
        sess = dlc.Session(dlc.compile(BIGRAM), backend=backend, seed=0)
        losses = sess.train(data, optimizer=dlc.Adam(0.1), batch_size=16, steps=40)
        assert losses[-1] < losses[0]
        texts.append(sess.generate("KING", 30, vocab=data.vocab, top_k=3, seed=5))
    assert texts[0] == texts[1] and len(texts[0]) == 30
