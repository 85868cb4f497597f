"""Helpers of the browser tests: NumPy arrays to dlc.js feeds and back."""

from __future__ import annotations

import numpy as np


def feed(arrays: dict[str, np.ndarray]) -> dict:
    """NumPy arrays as dlc.js feeds ({data, shape}; the data as a list, made a Float32Array in JS)."""
    return {
        n: {"data": np.asarray(v, np.float32).ravel().tolist(), "shape": list(np.shape(v))} for n, v in arrays.items()
    }


# In the page: turn feed() lists into Float32Arrays and results into lists.
JS_FEEDS = (
    "const feeds = Object.fromEntries(Object.entries(arg.feeds)"
    ".map(([n, f]) => [n, {data: Float32Array.from(f.data), shape: f.shape}]));"
)
JS_OUT = "Object.fromEntries(Object.entries(out).map(([n, v]) => [n, {data: Array.from(v.data), shape: v.shape}]))"


def fill_text_form(page, prompt: str, tokens: int, seed: int, temperature: str = "1", top_k: str = "") -> None:
    """Type a prompt and generation settings into the text page's form (not submitted)."""
    page.locator("#prompt").fill(prompt)
    for field, value in (
        ("#tokens", str(tokens)),
        ("#temperature", temperature),
        ("#topk", top_k),
        ("#seed", str(seed)),
    ):
        page.locator(field).fill(value)
