"""The manifest fuzzer: thousands of tampered artifacts from the samples, each either accepted
whole or refused with a dlc error, never another exception. Seeded; no GL (the GL half, running
a few accepted mutants, is tests/gl/test_artifact_gl.py)."""

from __future__ import annotations

import pathlib
import shutil
import sys

import numpy as np
import pytest

import dlc
from dlc.compiler.emit import write_artifact
from dlc.runtime.artifact import files as manifest_files
from dlc.runtime.artifact.files import read_artifact, read_named_files
from dlc.runtime.artifact.manifest import ArtifactError, parse, validate
from dlc.runtime.errors import DlcError

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from manifest_mutants import file_mutant, json_mutant  # noqa: E402

SAMPLES = sorted(pathlib.Path("samples").resolve().glob("*.dl"))
JSON_MUTANTS = 2000
FILE_MUTANTS = 80


def compiled_samples(root: pathlib.Path) -> list[pathlib.Path]:
    """Each sample compiled for eval and with its training step."""
    out = []
    for path in SAMPLES:
        model = dlc.compile(str(path))
        out.append(write_artifact(model, root / f"{path.stem}.dlc"))
        if model.losses:
            out.append(
                write_artifact(
                    model, root / f"{path.stem}_train.dlc", train_loss=list(model.losses)[0], optimizer="adam"
                )
            )
    return out


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return compiled_samples(tmp_path_factory.mktemp("samples"))


def check(folder: pathlib.Path, raw: bytes):
    """What loading `folder` with manifest bytes `raw` does, short of GL: the files read, or
    the ArtifactError. Any other exception propagates (and fails the fuzzer)."""
    where = str(folder / "manifest.json")
    try:
        m = parse(raw, where)
        validate(m, where)
        return read_named_files(folder, m)
    except ArtifactError as e:
        assert str(e).startswith(f"{where}: "), str(e)
        return e


def test_every_pristine_sample_is_accepted(artifacts):
    assert len(artifacts) >= 2 * len(SAMPLES) - 1
    for folder in artifacts:
        files = read_artifact(folder)
        assert files.sources["eval"]


def test_json_mutants_are_accepted_or_refused_cleanly(artifacts, monkeypatch):
    # The folders do not change here: read each file once (file damage is the next test's).
    read = manifest_files.read_confined
    memo = {}

    def read_once(folder, name, limit, where, field):
        key = (folder, name, limit)
        if key not in memo:
            memo[key] = read(folder, name, limit, where, field)
        return memo[key]

    monkeypatch.setattr(manifest_files, "read_confined", read_once)
    rng = np.random.default_rng(8)
    bases = [(f, (f / "manifest.json").read_text()) for f in artifacts]
    refused = accepted = 0
    for i in range(JSON_MUTANTS):
        folder, text = bases[i % len(bases)]
        raw, what, changed = json_mutant(text, rng)
        try:
            outcome = check(folder, raw)
        except Exception as e:  # noqa: BLE001 - the point: name the mutant that broke it
            pytest.fail(f"mutant {i} of {folder.name} ({what}) raised {type(e).__name__}: {e}")
        if isinstance(outcome, ArtifactError):
            refused += 1
        else:
            accepted += 1
    # Most damage is caught; the accepted rest changes fields the runtime can run with.
    assert refused > JSON_MUTANTS // 2 and accepted > 0, (refused, accepted)


def test_file_mutants_are_refused_cleanly(artifacts, tmp_path):
    rng = np.random.default_rng(88)
    outside = tmp_path / "outside.glsl"
    outside.write_text("#version 430\nvoid main() {}\n")
    refused = 0
    for i in range(FILE_MUTANTS):
        base = artifacts[i % len(artifacts)]
        folder = tmp_path / f"m{i}" / base.name
        shutil.copytree(base, folder)
        what = file_mutant(folder, outside, rng)
        try:
            read_artifact(folder)
        except DlcError as e:
            refused += 1
            assert isinstance(e, ArtifactError), f"mutant {i} ({what}): {e!r}"
            assert "#version" not in str(e), f"mutant {i} ({what}) echoes a file: {e}"
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"mutant {i} of {base.name} ({what}) raised {type(e).__name__}: {e}")
        shutil.rmtree(folder.parent)
    assert refused > FILE_MUTANTS // 2
