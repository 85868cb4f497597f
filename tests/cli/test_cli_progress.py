"""The training progress display: plain lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io

from dlc.progress import TrainProgress


def test_plain_lines_first_every_tenth_and_last():
    out = io.StringIO()
    p = TrainProgress(total_steps=50, epochs=2, stream=out, live=False)
    for step in range(1, 51):
        p.update(step, 1 + (step - 1) // 25, 1.0 / step, 8)
    p.message("epoch 2: val cost 0.5")
    p.close()
    lines = out.getvalue().splitlines()
    steps = [int(line.split("step ")[1].split("/")[0]) for line in lines if "step " in line]
    assert steps == [1, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert lines[0].startswith("epoch 1/2  step 1/50  loss 1  ")
    assert lines[-2].startswith("epoch 2/2  step 50/50  loss 0.02  ")
    assert "ex/s" in lines[0]
    assert lines[-1] == "epoch 2: val cost 0.5"
    assert p.examples == 400


def test_unknown_total_and_epochs():
    out = io.StringIO()
    p = TrainProgress(total_steps=None, epochs=None, stream=out, live=False)
    p.update(1, 1, 2.5, 4)
    assert out.getvalue().startswith("epoch 1  step 1  loss 2.5")


def test_live_bar_renders_with_rich():
    out = io.StringIO()
    p = TrainProgress(total_steps=3, epochs=1, stream=out, live=True)
    for step in (1, 2, 3):
        p.update(step, 1, 0.5, 10)
    p.message("a note above the bar")
    p.close()
    text = out.getvalue()
    assert "step 3/3" in text and "loss 0.5" in text and "epoch 1/1" in text
    assert "a note above the bar" in text
