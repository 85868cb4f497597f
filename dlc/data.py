"""Data files for a model's inputs: reading `.npz` and `.csv`, and refusing what does not fit.

A data file holds one array per input; the first axis of each is the example
axis. `.npz`: arrays keyed by input name. `.csv`: a header line; column `x`
feeds `x: [B]`, columns `x.0 ... x.k-1` feed `x: [B, k]` (an input of higher
rank takes its trailing dims flattened in C order, `x.0 ... x.(h*w-1)`).

Every refusal is a DataError naming the file, the input and, for CSV, the
line, so a person can fix the file. Nothing here imports the compiler, so the
artifact runtime can use it too.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from dlc.runtime.elements import to_int32
from dlc.runtime.npzfile import NpzReader

from .runtime.errors import DataError, format_shape
from .runtime.feeds import _suggest, bind_dims, ignore_unknown
from .runtime.source_text import utf8_position

Shape = tuple  # of int | str

_GROUP = re.compile(r"^(?P<name>.+)\.(?P<index>[0-9]+)$")


@dataclass(frozen=True)
class Data:
    """Validated feeds from one file: float32 arrays keyed by input name."""

    path: str
    arrays: dict[str, np.ndarray]
    dims: dict[str, int]
    examples: int  # length of the example axis (0 if no fed input has one)

    def batches(self, inputs: Mapping[str, Shape], batch_size: int | None):
        """Yield (feeds, count) slices of at most batch_size examples, in file order."""
        per_example = example_inputs(inputs, self.arrays)
        if not batch_size or batch_size >= self.examples or not per_example:
            yield self.arrays, self.examples
            return
        for start in range(0, self.examples, batch_size):
            stop = min(start + batch_size, self.examples)
            yield ({k: (v[start:stop] if k in per_example else v) for k, v in self.arrays.items()}, stop - start)


def example_inputs(inputs: Mapping[str, Shape], names: Iterable[str]) -> set[str]:
    """The inputs among `names` whose leading dim is symbolic: they carry the example axis."""
    return {n for n in names if len(inputs[n]) >= 1 and isinstance(inputs[n][0], str)}


def load_data(
    path: str | os.PathLike,
    inputs: Mapping[str, Shape],
    needed: Iterable[str] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> Data:
    """Read and validate a data file for a model whose inputs have the shapes `inputs` (and
    the element types `dtypes`, default all f32: an i32 input's array becomes int32, from any
    integer dtype or from whole floats, in range).

    `needed`: the inputs that must be present (those the fetches or the loss
    depend on); None means all of them. Inputs that are present but not needed
    are checked all the same: a file is refused as a whole.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".npz", ".csv"):
        raise DataError(f"{path}: data files are .npz or .csv, not '{ext or path}'")
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    dtypes = dtypes or {}
    if ext == ".npz":
        arrays, where = read_npz(path, inputs, dtypes), {}
    else:
        arrays, where = read_csv(path, inputs, dtypes)
    needed = list(inputs) if needed is None else [n for n in inputs if n in set(needed)]
    names = _names_in(path, ext)
    ignored = ignore_unknown(
        inputs,
        list(dict.fromkeys(_input_of(n, inputs) for n in names)),
        set(needed),
        source=path,
        what="array" if ext == ".npz" else "column",
    )
    missing = [n for n in needed if n not in arrays]
    if missing:
        has = ", ".join(arrays) or "nothing"
        name = missing[0]
        what = "an array" if ext == ".npz" else _csv_columns_for(name, inputs[name])
        raise DataError(
            f"{path}: input '{name}' is missing: the file needs {what} for it (it has: {has}){_suggest(name, ignored)}"
        )
    _check_finite(path, arrays, where)
    _check_rows(path, inputs, arrays)
    dims = bind_dims(inputs, arrays, needed=set(needed), source=path)
    ex = example_inputs(inputs, arrays)
    examples = len(arrays[next(iter(sorted(ex)))]) if ex else 0
    return Data(path, arrays, dims, examples)


def _names_in(path: str, ext: str) -> list[str]:
    """The array names of an .npz, or the header of a CSV (already read once, so readable)."""
    if ext == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return list(z.files)
    with open(path, newline="", encoding="utf-8-sig") as f:
        header = next((row for row in csv.reader(f) if row and any(c.strip() for c in row)), [])
    return [c.strip() for c in header]


def _input_of(name: str, inputs: Mapping[str, Shape]) -> str:
    """The array a CSV column belongs to: `x.3` is `x`'s (one notice for `labels.0 ...`)."""
    m = _GROUP.match(name)
    return m["name"] if name not in inputs and m else name


# -- .npz ------------------------------------------------------------------------


def read_npz(path: str, inputs: Mapping[str, Shape], dtypes: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz that feed inputs, as float32 (int32 for i32 inputs), refusing
    non-numeric ones."""
    z = NpzReader(path)  # checks each header against the file's size; DataError naming the file
    out: dict[str, np.ndarray] = {}
    with z:
        for k in z.files:
            if k not in inputs:  # an array no input reads (labels, ids, ...): load_data notes it
                continue
            a = z[k]
            if a.dtype.kind not in "biuf":
                raise DataError(f"{path}: array '{k}' for input '{k}' holds {a.dtype} values, not numbers")
            if (dtypes or {}).get(k) == "i32":
                out[k] = to_int32(a, f"{path}: array '{k}'")
                continue
            with np.errstate(over="ignore"):
                out[k] = np.asarray(a, dtype=np.float32)
    return out


# -- .csv ------------------------------------------------------------------------


def read_csv(
    path: str, inputs: Mapping[str, Shape], dtypes: Mapping[str, str] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    """Arrays from a CSV with a header (float32; int32 for i32 inputs); also, per input, the
    file line of each example."""
    reader = csv.reader(io.StringIO(_csv_text(path), newline=""))
    header: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue  # blank lines are allowed anywhere
            if header is None:
                header, header_line = [c.strip() for c in row], reader.line_num
                continue
            if len(row) != len(header):
                raise DataError(
                    f"{path}:{reader.line_num}: {len(row)} cells but the header "
                    f"(line {header_line}) has {len(header)} columns"
                )
            rows.append(row)
            lines.append(reader.line_num)
    except csv.Error as e:  # a field over csv's size limit, a NUL byte, ...
        raise DataError(f"{path}:{reader.line_num}: not a readable CSV line ({e})") from None
    if header is None:
        raise DataError(f"{path}: empty file: a CSV data file needs a header line")
    groups = _column_groups(path, header, header_line, inputs)
    values = np.empty((len(rows), len(header)), dtype=np.float64)  # exact for any int32 id
    used = {c for cols, _ in groups.values() for c in cols}  # ignored columns may hold text
    for r, (row, line) in enumerate(zip(rows, lines)):
        for c, cell in enumerate(row):
            if c in used:
                values[r, c] = _number(path, line, header[c], cell)
    out: dict[str, np.ndarray] = {}
    for name, (cols, plain) in groups.items():
        block = values[:, cols]
        a = block[:, 0] if plain else _shape_columns(path, name, inputs[name], block, header_line)
        if (dtypes or {}).get(name) == "i32":
            out[name] = to_int32(a, f"{path}: input '{name}'") if np.isfinite(a).all() else a
        else:
            with np.errstate(over="ignore"):
                out[name] = a.astype(np.float32)
    return out, {name: lines for name in out}


def _csv_text(path: str) -> str:
    """The file as text (a leading BOM dropped); a byte that is not UTF-8 is a DataError naming
    its line and column."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line, column = utf8_position(raw, e.start)
        raise DataError(
            f"{path}:{line}: byte 0x{raw[e.start]:02x} at column {column} is not "
            "UTF-8 text: a CSV data file must be UTF-8"
        ) from None


def _column_groups(
    path: str, header: list[str], header_line: int, inputs: Mapping[str, Shape]
) -> dict[str, tuple[list[int], bool]]:
    """Input name -> (header indices feeding it in order, whether it is one plain column `x`).

    Refuses duplicate columns and column groups with gaps; leaves out columns that feed no
    input (load_data notes them).
    """
    seen: dict[str, int] = {}
    plain: dict[str, int] = {}
    grouped: dict[str, dict[int, int]] = {}
    where = f"{path}:{header_line}"
    for c, col in enumerate(header):
        if not col:
            raise DataError(f"{where}: column {c + 1} of the header has no name")
        if col in seen:
            raise DataError(f"{where}: column '{col}' appears twice in the header")
        seen[col] = c
        m = _GROUP.match(col)
        if col in inputs:
            plain[col] = c
        elif m and m["name"] in inputs:
            grouped.setdefault(m["name"], {})[int(m["index"])] = c
    out: dict[str, tuple[list[int], bool]] = {}
    for name in inputs:  # model order, so errors come out in a stable order
        if name in plain and name in grouped:
            raise DataError(
                f"{where}: input '{name}' has both a column '{name}' and columns '{name}.0 ...': use one or the other"
            )
        if name in plain:
            out[name] = ([plain[name]], True)
        elif name in grouped:
            idx = grouped[name]
            k = max(idx) + 1
            if len(idx) != k:  # the first gap, found without counting up to k (x.99999...)
                gap = next((i for i, j in enumerate(sorted(idx)) if i != j), len(idx))
                raise DataError(
                    f"{where}: the columns of input '{name}' have a gap: "
                    f"'{name}.{gap}' is missing (found {name}.0 ... {name}.{k - 1}"
                    f" with {len(idx)} of {k} present)"
                )
            out[name] = ([idx[i] for i in range(k)], False)
    return out


def _csv_columns_for(name: str, shape: Shape) -> str:
    if len(shape) <= 1:
        return f"a column '{name}'"
    tail = shape[1:]
    if all(isinstance(d, int) for d in tail):
        k = math.prod(tail)
        return f"columns '{name}.0'" + (f" ... '{name}.{k - 1}'" if k > 1 else "")
    return f"columns '{name}.0', '{name}.1', ..."


def _number(path: str, line: int, column: str, cell: str) -> float:
    text = cell.strip()
    try:
        return float(text)
    except ValueError:
        short = cell if len(cell) <= 40 else cell[:40] + "..."
        shown = (f"'{short}'" if short.isprintable() else ascii(short)) if text else "an empty cell"
        raise DataError(f"{path}:{line}: column '{column}' holds {shown}, not a number") from None


def _shape_columns(path: str, name: str, want: Shape, block: np.ndarray, header_line: int) -> np.ndarray:
    """Columns name.0 ... name.k-1 as an array of the input's rank (trailing dims in C order)."""
    k = block.shape[1]
    tail = want[1:]
    if len(want) <= 1:
        raise DataError(
            f"{path}:{header_line}: input '{name}' has shape {format_shape(want)}: it is fed "
            f"by one column '{name}', not by columns '{name}.0 ...'"
        )
    if len(tail) == 1:
        return block  # a symbolic trailing dim binds to k; bind_dims checks a concrete one
    if any(isinstance(d, str) for d in tail):
        raise DataError(
            f"{path}: input '{name}' has shape {format_shape(want)}: a CSV can feed its "
            "trailing dims only when they are concrete"
        )
    size = math.prod(tail)
    if k != size:
        raise DataError(
            f"{path}:{header_line}: input '{name}' has shape {format_shape(want)}, which "
            f"takes {size} columns '{name}.0 ... {name}.{size - 1}', but the file "
            f"has {k}"
        )
    return block.reshape((block.shape[0], *tail))


# -- checks ----------------------------------------------------------------------


def _check_finite(path: str, arrays: Mapping[str, np.ndarray], lines: Mapping[str, list[int]]) -> None:
    for name, a in arrays.items():
        bad = ~np.isfinite(a)
        if bad.any():
            at = np.argwhere(bad)[0]
            value = a[tuple(at)]
            what = "NaN" if np.isnan(value) else "an infinite value"
            if name in lines and a.ndim >= 1:
                raise DataError(f"{path}:{lines[name][at[0]]}: input '{name}' holds {what}")
            where = f" at index {list(map(int, at))}" if a.ndim else ""
            raise DataError(f"{path}: input '{name}' holds {what}{where}")


def _check_rows(path: str, inputs: Mapping[str, Shape], arrays: Mapping[str, np.ndarray]) -> None:
    """Every array with an example axis must have the same number of examples."""
    order = [n for n in inputs if n in example_inputs(inputs, arrays)]
    counts = {n: len(arrays[n]) for n in order if np.ndim(arrays[n]) >= 1}
    if len(set(counts.values())) > 1:
        (a, na), (b, nb) = _two_different(counts)
        raise DataError(f"{path}: rows of unequal count: input '{a}' has {na} examples but input '{b}' has {nb}")


def _two_different(counts: dict[str, int]):
    items = list(counts.items())
    first = items[0]
    for item in items[1:]:
        if item[1] != first[1]:
            return first, item
    raise AssertionError("counts are equal")
