"""`dlc generate MODEL --weights W.npz`: text sampled from a language model, as it is drawn."""

from __future__ import annotations

import argparse
import sys

from .. import text as text_data
from ..generate import KVCache
from ..runtime.errors import UsageError
from .models import open_model, open_session
from .options import (
    add_backend,
    add_block,
    add_model,
    add_seed,
    add_target,
    add_vocab,
    add_weights,
    apply_target,
    positive_int,
)

DESCRIPTION = (
    "Continue a prompt with characters sampled from the model's `logits` "
    "(tokens: i32[B, T] with T symbolic),\nprinted as they are drawn. The vocabulary "
    "(and the window length) come from the file\n`dlc train` wrote beside the weights. "
    "The same seed gives the same text."
)
EPILOG = (
    "example:\n"
    "  dlc generate samples/char_gpt.dl --weights gpt.npz --prompt 'ROMEO:' --tokens 500 "
    "--temperature 0.8 --top-k 40"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    add_model(c)
    add_weights(c, "the trained params (and W.vocab.json beside)", required=True)
    add_vocab(c, "the vocabulary file (default: beside the weights)")
    c.add_argument("--prompt", default="\n", metavar="TEXT", help="the text to continue (default: a newline)")
    c.add_argument("--tokens", type=int, default=500, metavar="N", help="characters to generate (default: 500)")
    c.add_argument("--temperature", type=float, default=1.0, metavar="T", help="0: the most likely; default 1")
    c.add_argument("--top-k", type=positive_int, metavar="K", help="draw from the K most likely only")
    add_block(c, "the longest context (default: the vocab's)")
    add_seed(c, "seed of the sampling (default: 0)")
    c.add_argument(
        "--no-cache",
        action="store_true",
        help="run the whole context each token (default: a KV cache where the model allows it)",
    )
    add_backend(c, "gl or numpy; default: gl when it can be made")
    add_target(c)


def run(args: argparse.Namespace) -> int:
    """Print the prompt, then each sampled character as it comes."""
    apply_target(args)
    if args.tokens < 0 or not args.temperature >= 0:
        raise UsageError("--tokens and --temperature must be 0 or more")
    t = open_model(args.model)
    vocab = text_data.Vocab.load(args.vocab or text_data.vocab_path(args.weights))
    session = open_session(t, args.backend, 0)
    session.load(args.weights)
    block = args.block or vocab.block
    if not args.no_cache and args.tokens and block:
        cache, why = KVCache.of(session, block)
        if cache is None:
            print(f"dlc: no KV cache: {why}; each token runs the whole context", file=sys.stderr)
    prompt = args.prompt.replace("\\n", "\n")  # a typed \n is a newline
    print(prompt, end="", flush=True)
    session.generate(
        prompt,
        args.tokens,
        vocab=vocab,
        block=args.block,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        cache=not args.no_cache,
        on_token=lambda c: print(c, end="", flush=True),
    )
    print()
    return 0
