"""What a REPL user sees: `dir(dlc)` and `__all__` list every public name, each has a
docstring, `help(dlc.Session)` shows only the public API, and the Session, Model and callback
methods each show an example."""

from __future__ import annotations

import inspect
import pydoc

import dlc


def test_all_names_resolve_and_are_documented():
    assert set(dlc.__all__) <= set(dir(dlc))
    for name in ("Session", "compile", "load", "EarlyStopping", "ModelCheckpoint", "LambdaCallback", "History"):
        assert name in dlc.__all__
    for name in dlc.__all__:
        value = getattr(dlc, name)
        if isinstance(value, str):  # __version__
            continue
        assert inspect.getdoc(value), f"dlc.{name} has no docstring"


def public_members(cls) -> dict[str, object]:
    return {n: m for n, m in inspect.getmembers(cls) if not n.startswith("_")}


def test_help_session_shows_only_the_public_api():
    text = pydoc.render_doc(dlc.Session, renderer=pydoc.plaintext)
    assert "train_step" not in text and "train_graph" not in text  # internals are underscored
    for name in ("fit", "train", "eval", "save", "load", "restore", "params"):
        assert name in text


def test_public_methods_have_an_example():
    for cls in (dlc.Session, dlc.Model, dlc.EarlyStopping, dlc.ModelCheckpoint, dlc.LambdaCallback, dlc.History):
        assert ">>>" in inspect.getdoc(cls), cls
        if cls is not dlc.Session:
            continue
        for name, member in public_members(cls).items():
            doc = inspect.getdoc(member) or ""
            assert ">>>" in doc, f"Session.{name} has no example in its docstring"
