"""Data files (dlc/data.py): .npz and .csv read into feeds; every misfit refused, named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlc.data import load_data
from dlc.runtime.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
QUAD = {"x": ("B",), "y_label": ("B",)}
LINEAR = {"x": ("B", 3), "label": ("B",)}


def write_csv(tmp_path: Path, text: str, name: str = "d.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def write_npz(tmp_path: Path, name: str = "d.npz", **arrays) -> Path:
    p = tmp_path / name
    np.savez(p, **arrays)
    return p


def refused(path, inputs, needed=None) -> str:
    with pytest.raises(DataError) as info:
        load_data(path, inputs, needed)
    return str(info.value)


# -- what is accepted ------------------------------------------------------------


def test_npz_sample():
    raw = np.load(ROOT / "samples/data/quadratic.npz")
    d = load_data(ROOT / "samples/data/quadratic.npz", QUAD)
    assert d.examples == 200 and d.dims == {"B": 200}
    np.testing.assert_array_equal(d.arrays["x"], raw["x"])
    assert all(a.dtype == np.float32 for a in d.arrays.values())


def test_csv_sample_column_groups():
    d = load_data(ROOT / "samples/data/linear.csv", LINEAR)
    np.testing.assert_array_equal(d.arrays["x"], [[1, 2, 3], [10, 20, 30], [100, 200, 300]])
    np.testing.assert_array_equal(d.arrays["label"], [4, 40, 400])
    assert d.dims == {"B": 3}


def test_csv_groups_in_index_order_not_header_order(tmp_path):
    p = write_csv(tmp_path, "label,x.2,x.0,x.1\n7,3,1,2\n8,6,4,5\n")
    d = load_data(p, LINEAR)
    np.testing.assert_array_equal(d.arrays["x"], [[1, 2, 3], [4, 5, 6]])


def test_csv_symbolic_width_binds_from_columns(tmp_path):
    p = write_csv(tmp_path, "f.0,f.1,f.2,f.3\n1,2,3,4\n")
    assert load_data(p, {"f": ("B", "K")}).dims == {"B": 1, "K": 4}


def test_csv_higher_rank_is_flattened_in_c_order(tmp_path):
    cols = ",".join(f"img.{i}" for i in range(6))
    p = write_csv(tmp_path, f"{cols}\n0,1,2,3,4,5\n")
    d = load_data(p, {"img": ("B", 2, 3)})
    np.testing.assert_array_equal(d.arrays["img"], np.arange(6).reshape(1, 2, 3))


def test_csv_blank_lines_and_spaces(tmp_path):
    p = write_csv(tmp_path, "x, y_label\n\n1, 2\n 3 ,4\n\n")
    d = load_data(p, QUAD)
    np.testing.assert_array_equal(d.arrays["y_label"], [2, 4])


def test_only_needed_inputs_are_required(tmp_path):
    p = write_npz(tmp_path, x=np.ones(5))
    assert load_data(p, QUAD, needed={"x"}).examples == 5
    assert "input 'y_label' is missing" in refused(p, QUAD)


def test_integer_and_bool_arrays_become_float32(tmp_path):
    p = write_npz(tmp_path, x=np.arange(4), y_label=np.array([True, False, True, True]))
    d = load_data(p, QUAD)
    assert d.arrays["x"].dtype == np.float32
    np.testing.assert_array_equal(d.arrays["y_label"], [1, 0, 1, 1])


def test_batches_slice_the_example_axis_only(tmp_path):
    p = write_npz(tmp_path, x=np.arange(10.0), w=np.ones(3))
    inputs = {"x": ("B",), "w": (3,)}
    d = load_data(p, inputs)
    parts = list(d.batches(inputs, 4))
    assert [n for _, n in parts] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([f["x"] for f, _ in parts]), np.arange(10.0))
    assert all(f["w"].shape == (3,) for f, _ in parts)
    assert [n for _, n in d.batches(inputs, None)] == [10]


# -- what is refused ---------------------------------------------------------------


def test_missing_input_npz(tmp_path):
    p = write_npz(tmp_path, x=np.ones(5))
    msg = refused(p, QUAD)
    assert str(p) in msg and "'y_label'" in msg and "it has: x" in msg


def test_missing_input_csv(tmp_path):
    p = write_csv(tmp_path, "x\n1\n")
    msg = refused(p, QUAD)
    assert str(p) in msg and "input 'y_label' is missing" in msg and "a column 'y_label'" in msg


def test_wrong_rank(tmp_path):
    p = write_npz(tmp_path, x=np.ones((5, 2)), y_label=np.ones(5))
    msg = refused(p, QUAD)
    assert "input 'x'" in msg and str(p) in msg and "[5, 2]" in msg and "[B]" in msg


def test_wrong_concrete_dim(tmp_path):
    p = write_csv(tmp_path, "x.0,x.1,label\n1,2,3\n")
    msg = refused(p, LINEAR)
    assert "input 'x'" in msg and "[1, 2]" in msg and "[B, 3]" in msg


def test_plain_column_for_a_rank_two_input(tmp_path):
    p = write_csv(tmp_path, "x,label\n1,2\n")
    msg = refused(p, LINEAR)
    assert "input 'x'" in msg and "[B, 3]" in msg


def test_grouped_columns_for_a_rank_one_input(tmp_path):
    p = write_csv(tmp_path, "x.0,y_label\n1,2\n")
    msg = refused(p, QUAD)
    assert f"{p}:1:" in msg and "input 'x'" in msg and "one column 'x'" in msg


def test_rows_of_unequal_count(tmp_path):
    p = write_npz(tmp_path, x=np.ones(5), y_label=np.ones(4))
    msg = refused(p, QUAD)
    assert "rows of unequal count" in msg and "'x' has 5" in msg and "'y_label' has 4" in msg


def test_unequal_count_across_different_dim_names(tmp_path):
    p = write_npz(tmp_path, a=np.ones(5), b=np.ones(6))
    assert "rows of unequal count" in refused(p, {"a": ("B",), "b": ("N",)})


def test_non_numeric_csv_cell_names_line_and_column(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n1,2\n3,four\n5,6\n")
    msg = refused(p, QUAD)
    assert msg.startswith(f"{p}:3:") and "column 'y_label'" in msg and "'four'" in msg


def test_empty_csv_cell(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n1,2\n\n3,\n")
    msg = refused(p, QUAD)
    assert msg.startswith(f"{p}:4:") and "an empty cell" in msg


def test_nan_in_csv_names_the_line(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n1,2\n3,4\nnan,6\n")
    msg = refused(p, QUAD)
    assert msg.startswith(f"{p}:4:") and "input 'x'" in msg and "NaN" in msg


def test_inf_in_csv(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n1,inf\n")
    assert "infinite" in refused(p, QUAD)


def test_nan_in_npz_names_the_index(tmp_path):
    x = np.ones((4, 3))
    x[2, 1] = np.nan
    p = write_npz(tmp_path, x=x, label=np.ones(4))
    msg = refused(p, LINEAR)
    assert "input 'x'" in msg and "NaN" in msg and "[2, 1]" in msg and str(p) in msg


def test_float64_overflowing_float32_is_refused(tmp_path):
    p = write_npz(tmp_path, x=np.array([1.0, 1e300]), y_label=np.ones(2))
    assert "infinite" in refused(p, QUAD)


def test_csv_column_group_with_a_gap(tmp_path):
    p = write_csv(tmp_path, "x.0,x.1,x.3,label\n1,2,3,4\n")
    msg = refused(p, LINEAR)
    assert msg.startswith(f"{p}:1:") and "gap" in msg and "'x.2' is missing" in msg


def test_unknown_npz_arrays_are_ignored_with_a_notice(tmp_path, capsys):
    p = write_npz(tmp_path, x=np.ones(2), y_label=np.ones(2), extra=np.ones(2), more=np.ones(2))
    d = load_data(p, QUAD)
    assert sorted(d.arrays) == ["x", "y_label"]
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "'extra'" in err and "'more'" in err
    assert "ignoring" in err and "not inputs of the model" in err


def test_unknown_csv_columns_are_ignored_even_with_text(tmp_path, capsys):
    p = write_csv(tmp_path, "x,y_label,z.0,weight\n1,2,3,heavy\n")
    d = load_data(p, QUAD)
    assert sorted(d.arrays) == ["x", "y_label"] and d.arrays["y_label"].tolist() == [2.0]
    err = capsys.readouterr().err
    assert "ignoring columns 'z', 'weight'" in err


def test_missing_input_names_a_close_ignored_array(tmp_path, capsys):
    p = write_npz(tmp_path, x=np.ones(2), y_lable=np.ones(2))
    msg = refused(p, QUAD)
    assert "input 'y_label' is missing" in msg and "'y_lable': a misspelling" in msg
    assert "did you mean 'y_label'?" in capsys.readouterr().err


def test_both_plain_and_grouped_columns(tmp_path):
    p = write_csv(tmp_path, "x,x.0,y_label\n1,2,3\n")
    assert "both a column 'x' and columns 'x.0" in refused(p, QUAD)


def test_duplicate_column(tmp_path):
    p = write_csv(tmp_path, "x,x,y_label\n1,2,3\n")
    assert "'x' appears twice" in refused(p, QUAD)


def test_row_with_wrong_cell_count(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n1,2\n3,4,5\n")
    msg = refused(p, QUAD)
    assert msg.startswith(f"{p}:3:") and "3 cells" in msg and "2 columns" in msg


def test_header_only_has_no_examples(tmp_path):
    p = write_csv(tmp_path, "x,y_label\n")
    assert "no examples" in refused(p, QUAD)


def test_empty_csv(tmp_path):
    assert "header" in refused(write_csv(tmp_path, ""), QUAD)


def test_missing_file_and_unknown_extension(tmp_path):
    assert "no such file" in refused(tmp_path / "nope.npz", QUAD)
    p = tmp_path / "d.json"
    p.write_text("{}")
    assert ".npz or .csv" in refused(p, QUAD)


def test_corrupt_npz(tmp_path):
    p = tmp_path / "d.npz"
    p.write_bytes(b"not a zip file at all")
    assert "not a readable .npz" in refused(p, QUAD)


def test_non_numeric_npz_array(tmp_path):
    p = write_npz(tmp_path, x=np.array(["a", "b"]), y_label=np.ones(2))
    msg = refused(p, QUAD)
    assert "'x'" in msg and "not numbers" in msg


def test_pickled_npz_array_is_never_loaded(tmp_path):
    p = write_npz(tmp_path, x=np.array([{"a": 1}, None], dtype=object), y_label=np.ones(2))
    assert "pickle" in refused(p, QUAD)


def test_missing_grouped_input_csv_says_which_columns(tmp_path):
    p = write_csv(tmp_path, "label\n1\n")
    assert "columns 'x.0' ... 'x.2'" in refused(p, LINEAR)
