"""samples/lstm.dl trains as PyTorch's nn.LSTM + nn.Linear from the same initial weights:
a few Adam steps on numpy and on GL give PyTorch's losses and params within float tolerance.
Its param names are the torch module's state_dict keys, so the weights load as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dlc

torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
STEPS = 4
ROWS = 32


class LSTMHead(torch.nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.lstm = torch.nn.LSTM(d, h, batch_first=True)
        self.head = torch.nn.Linear(h, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def torch_run(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray):
    """PyTorch's losses over STEPS Adam steps from `params`, and its params after them."""
    model = LSTMHead(x.shape[2], params["lstm.weight_hh_l0"].shape[1]).double()
    model.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()})
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(
    "backend, target",
    [
        ("numpy", None),
        pytest.param("gl", "compute", marks=pytest.mark.gl),  # the texture target passes too (a minute on llvmpipe)
    ],
)
def test_lstm_trains_as_pytorch(backend, target):
    if backend == "gl":
        from dlc.runtime.device import has_context

        if not has_context():
            pytest.skip("no OpenGL context")
    with np.load(SAMPLES / "data" / "sequences.npz") as data:
        x, y = data["x"][:ROWS], data["y"][:ROWS]
    s = dlc.Session(str(SAMPLES / "lstm.dl"), backend=backend, target=target, seed=5)
    start = {k: np.array(v) for k, v in s.params.items()}
    assert sorted(start) == sorted(LSTMHead(2, 16).state_dict())  # the names map one to one
    want_losses, want = torch_run(start, x, y)
    losses = s.train({"x": x, "y": y}, optimizer=dlc.Adam(0.01), steps=STEPS, batch_size=ROWS)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    assert want_losses[-1] < want_losses[0]  # it learns
    for k, v in s.params.items():
        np.testing.assert_allclose(v, want[k], rtol=1e-4, atol=1e-5, err_msg=k)
