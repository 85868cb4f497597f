from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import dlc
from dlc.compiler.ir import Node
from dlc.compiler.verify import IRError, check_graph

SAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("samples").glob("*.dl"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_front_end_output_passes_the_checker(path):
    check_graph(dlc.compile(str(path)).graph)


def test_checker_names_a_wrong_shape_with_context():
    g = dlc.compile("samples/quadratic.dl").graph
    i = g.names["y"]
    bad = list(g.nodes)
    bad[i] = dataclasses.replace(bad[i], shape=(3,))
    with pytest.raises(IRError, match=r"malformed IR at %10: shape is \[3\] but add gives \['B'\]") as e:
        check_graph(dataclasses.replace(g, nodes=tuple(bad)))
    assert ">> y = add(" in str(e.value)


def test_checker_refuses_use_before_definition():
    g = dlc.compile("samples/quadratic.dl").graph
    nodes = list(g.nodes) + [Node("neg", (len(g.nodes),), ())]
    with pytest.raises(IRError, match="not defined before its use"):
        check_graph(dataclasses.replace(g, nodes=tuple(nodes)))
