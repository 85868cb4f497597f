"""The front end on long, deep and oddly written models: it builds them or says where not.

Values are checked against NumPy on the numpy backend; errors against the line and column
lark gives (lark counts only "\\n" as a line end).
"""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.lang import MAX_LITERAL_RANK


def compile_error(src: str) -> dlc.CompileError:
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(src)
    return info.value


def eval_y(src: str, x: np.ndarray) -> np.ndarray:
    sess = dlc.Session(dlc.compile(src), backend="numpy", seed=0)
    return np.asarray(sess.eval("y", {"x": x}))


X = np.array([0.5, -1.25, 2.0], dtype=np.float32)


# -- long and deep expressions ---------------------------------------------------


def test_flat_sum_of_1000_terms_on_one_line():
    terms = [f"{k % 7} * x" for k in range(1000)]
    y = eval_y("input x: [B]\ny = " + " + ".join(terms) + "\n", X)
    np.testing.assert_allclose(y, sum(k % 7 for k in range(1000)) * X.astype(np.float64), rtol=1e-5)


def test_long_difference_chain_keeps_left_associativity():
    # x - x - x - ... (400 terms) is (x - x) - x ...: -398 x, not x.
    y = eval_y("input x: [B]\ny = " + " - ".join(["x"] * 400) + "\n", X)
    np.testing.assert_allclose(y, -398 * X.astype(np.float64), rtol=1e-5)


def test_2000_nested_calls():
    y = eval_y("input x: [B]\ny = " + "neg(" * 2001 + "x" + ")" * 2001 + "\n", X)
    np.testing.assert_array_equal(y, -X)


def test_deep_parentheses_minus_signs_and_powers():
    y = eval_y("input x: [B]\ny = " + "(" * 2000 + "x" + ")" * 2000 + "\n", X)
    np.testing.assert_array_equal(y, X)
    y = eval_y("input x: [B]\ny = " + "-" * 3001 + "x\n", X)
    np.testing.assert_array_equal(y, -X)
    # Right associative: 1^1^...^x is 1 for any x.
    y = eval_y("input x: [B]\ny = " + "1^" * 1500 + "x\n", X)
    np.testing.assert_array_equal(y, np.ones_like(X))


def test_a_deep_list_literal_is_a_located_error():
    src = "input x: [B]\nconst c = " + "[" * 2000 + "1" + "]" * 2000 + "\n"
    e = compile_error(src)
    assert "nested more than 32 deep" in e.message
    assert (e.line, e.column) == (2, 11 + MAX_LITERAL_RANK)


def test_a_list_literal_at_the_rank_limit_builds():
    n = MAX_LITERAL_RANK
    model = dlc.compile("const c = " + "[" * n + "2" + "]" * n + "\ny = c * 1\n")
    assert model.tensors["y"] == (1,) * n


def test_deep_list_inside_an_expression_is_located():
    e = compile_error("input x: [B]\ny = x + " + "[" * 40 + "1" + "]" * 40 + "\n")
    assert "nested more than" in e.message and e.line == 2


# -- initializer arguments ----------------------------------------------------------


@pytest.mark.parametrize(
    "init,column,words",
    [
        ("normal(0, -1)", 26, "std must be >= 0"),
        ("normal(std=-1)", 27, "std must be >= 0"),
        ("normal(mean=1, std=-0.5)", 35, "std must be >= 0"),
        ("uniform(1, -1)", 27, "high must be >= its low"),
        ("uniform(high=-2)", 29, "high must be >= its low"),
        ("normal(0, 1e38)", 26, "beyond float32's range"),
    ],
)
def test_bad_initializer_arguments_fail_at_compile_time(init, column, words):
    e = compile_error(f"param w: [3] = {init}\n")
    assert words in e.message
    assert (e.line, e.column) == (1, column)


def test_initializer_argument_given_twice():
    e = compile_error("param w: [3] = normal(0, 1, mean=2)\n")
    assert "'mean' twice" in e.message


@pytest.mark.parametrize("init", ["normal(0, 0)", "uniform(2, 2)", "uniform(-1e38, 1e38)", "normal(-3, 1e37)"])
def test_edge_initializers_draw_finite_values(init):
    model = dlc.compile(f"param w: [50] = {init}\ny = w * 1\n")
    sess = dlc.Session(model, backend="numpy", seed=3)
    assert np.all(np.isfinite(sess.eval("w", {})))


def test_graph_api_initializers_are_checked_too():
    g = dlc.Graph()
    with pytest.raises(dlc.CompileError, match="std must be >= 0"):
        g.variable("w", ("normal", 0.0, -1.0), shape=[2])
    with pytest.raises(dlc.CompileError, match="finite"):
        g.variable("v", float("nan"), shape=[2])


def test_dlc_check_reports_a_bad_initializer(tmp_path, capsys):
    from dlc.cli import main

    p = tmp_path / "m.dl"
    p.write_text("input x: [B]\nparam w: [] = uniform(1, -1)\ny = w * x\n")
    assert main(["check", str(p)]) == 1
    err = capsys.readouterr().err
    assert f"{p}:2:26: error: uniform's high must be >= its low" in err


# -- source positions -----------------------------------------------------------------


@pytest.mark.parametrize("sep", ["\x0c", "\u2028", "\x0b", "\x85", "\u2029"])
def test_line_separators_lark_does_not_count_do_not_shift_the_echoed_line(sep):
    # Python's splitlines() would split here; lark does not, and neither may the echo.
    src = f"# a comment{sep}with a separator\ninput x: [B]\ny = x +\n"
    e = compile_error(src)
    assert (e.line, e.column) == (3, 8)
    assert e.format().splitlines()[1] == "    y = x +"
    # Outside a comment the character itself is the error, on its own line.
    if sep != "\x0c":  # a form feed is white space
        e = compile_error(f"input x: [B]\ny = x{sep}\n")
        assert (e.line, e.column) == (2, 6)


def test_an_error_after_a_form_feed_on_the_same_line():
    e = compile_error("input x: [B]\n\x0cy = $\n")
    assert (e.line, e.column) == (2, 6)
    lines = e.format().splitlines()
    assert lines[1] == "    ?y = $"  # the form feed is shown as '?' so the caret lines up
    assert lines[2] == "         ^"


def test_an_odd_character_is_named_by_its_code_point():
    e = compile_error("input x: [B]\u2028y = x\n")
    assert "U+2028" in e.message and (e.line, e.column) == (1, 13)


def test_crlf_and_lone_cr():
    e = compile_error("input x: [B]\r\ny = $\r\n")
    assert (e.line, e.column) == (2, 5)
    assert e.format().splitlines()[1] == "    y = $"
    e = compile_error("input x: [B]\ry = x\n")
    assert (e.line, e.column) == (1, 13) and "U+000D" in e.message


def test_a_leading_bom_is_accepted(tmp_path):
    p = tmp_path / "bom.dl"
    p.write_bytes(b"\xef\xbb\xbfinput x: [B]\ny = 2 * x\n")
    np.testing.assert_array_equal(dlc.Session(dlc.compile(p), backend="numpy").eval("y", {"x": X}), 2 * X)
    # Columns on the first line do not count the BOM.
    p.write_bytes(b"\xef\xbb\xbfinput x: [B] $\n")
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(p)
    assert (info.value.line, info.value.column) == (1, 14)


def test_a_bom_anywhere_else_is_an_error():
    e = compile_error("input x: [B]\n\ufeffy = x\n")
    assert (e.line, e.column) == (2, 1) and "U+FEFF" in e.message


def test_a_huge_const_filled_from_a_scalar_is_refused_before_allocating():
    e = compile_error("const c: [4294967297, 65536] = 1\n")
    assert "at most 1,048,576" in e.message and (e.line, e.column) == (1, 7)
    assert dlc.compile("const c: [1024, 1024] = 1\ny = c * 2\n").tensors["y"] == (1024, 1024)
