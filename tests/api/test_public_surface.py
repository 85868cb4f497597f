"""What a REPL user sees: `dir(dlc)` and `__all__` list every public name, each has a
docstring with an example, as has each public member of the public classes, and
`help(dlc.Session)` shows only the public API."""

from __future__ import annotations

import inspect
import pydoc
import re
import types

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
            assert has_example(doc), f"Session.{name} has no example in its docstring"


# The classes a user meets (the names of dlc.__all__ that are classes, and the schedules).
PUBLIC_CLASSES = [
    *(getattr(dlc, n) for n in dlc.__all__ if isinstance(getattr(dlc, n), type)),
    dlc.schedules.Schedule,
    dlc.schedules.Constant,
    dlc.schedules.Cosine,
    dlc.schedules.Linear,
    dlc.schedules.Step,
]
# What defines a member: a method, a property or a slot (not a field's default or an enum value).
MEMBER_KINDS = (types.FunctionType, property, staticmethod, classmethod, types.MemberDescriptorType)


def has_example(doc: str) -> bool:
    """A `>>>` line or an indented code line (inspect.getdoc has removed the common indent)."""
    return ">>>" in doc or any(line.startswith("    ") and line.strip() for line in doc.splitlines())


def own_public_members(cls: type) -> dict[str, object]:
    """The public members dlc defines on `cls` or its dlc bases (not Exception's or Enum's)."""
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("dlc"):
            continue
        if isinstance(vars(owner)[name], MEMBER_KINDS):
            out[name] = getattr(cls, name)
    return out


def test_every_public_name_and_member_has_a_docstring_with_an_example():
    assert {dlc.Session, dlc.Graph, dlc.Tensor, dlc.Array, dlc.AdamW, dlc.DlcError} <= set(PUBLIC_CLASSES)
    missing = []
    for name in dlc.__all__:
        value = getattr(dlc, name)
        if isinstance(value, str):  # __version__
            continue
        doc = inspect.getdoc(value) or ""
        if not doc or not has_example(doc):
            missing.append(f"dlc.{name}: {'no docstring' if not doc else 'no example'}")
    checked = 0
    for cls in PUBLIC_CLASSES:
        for name, member in own_public_members(cls).items():
            doc = inspect.getdoc(member) or ""
            checked += 1
            if not doc or not has_example(doc):
                missing.append(f"{cls.__name__}.{name}: {'no docstring' if not doc else 'no example'}")
    assert checked > 100  # Array's op methods included: the walk found the members
    assert not missing, "\n".join(missing)


def test_the_example_check_can_fail():
    assert not has_example("A learning rate.\nIt decays.")
    assert has_example("A learning rate.\n\n>>> dlc.SGD(0.1)")
    assert has_example("A learning rate.\n\n    opt = dlc.SGD(0.1)")


def test_help_shows_no_private_name():
    for cls in (dlc.Session, dlc.Model, dlc.Graph, dlc.Array):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        # a dunder attribute's value (a dataclass's `__dataclass_params__ = _DataclassParams(...)`)
        text = re.sub(r"(?m)^[ |]*__\w+__ = .*$", "", text)
        private = {n for n in re.findall(r"(?<![\w.])_\w+", text) if not (n.startswith("__") and n.endswith("__"))}
        assert not private, f"help(dlc.{cls.__name__}) shows {sorted(private)}"
