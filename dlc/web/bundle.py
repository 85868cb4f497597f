"""The shader bundle of a web export (`shaders.json`): every pass's shader in one file, one
fetch at load, and passes whose shaders differ only in integer constants sharing one program.

A kernel's shader bakes its shapes in as literals (`r / 224`, `q < 96`), and the emitter's
local names carry node ids (`n53_1`), so SqueezeNet's 26 convs gave 94 distinct programs, each
compiled and built for the GPU (SwiftShader: ~25 ms a program at its first draw). Here the
shaders whose token sequences agree once the local names ending in digits are renamed in order
of appearance and the integer literals inside functions are set aside share one *template*:
the literals all of them agree on stay in its text, and those that differ become elements of
`uniform int dlc_k[n]`, which dlc.js sets per pass from that pass's values (94 -> 20 programs
for SqueezeNet's outputs). A shader no other one shares stays its own text, untouched.

    {"format": 1,
     "programs": [template text, ...],            # GLSL ES 3.00, comments stripped
     "passes": {file: [program index, [ints]]}}  # every shader file the manifest names

`expand` gives back the code a pass runs (its ints written into the template): what the tests
compare with the kernel's own shader, and `check` reads a bundle as untrusted input (dlc.js
checks the same in its `checkBundle`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from dlc.runtime.errors import DataError

FORMAT = 1
FILE = "shaders.json"
MAX_BYTES = 64 << 20  # the bundle file
MAX_PROGRAM_CHARS = 1 << 20  # one template (an artifact's shader is at most 1 MiB)
MAX_LIFTED = 64  # dlc_k's length at most: a group needing more keeps its shaders apart
INT_MAX = 2**31 - 1
UNIFORM = "dlc_k"
LOCAL = "dlc_v"  # the renamed locals: dlc_v0, dlc_v1, ...

COMMENT = re.compile(r"//[^\n]*")  # as dlc.js's codeOf: the code a program is keyed by
TOKEN = re.compile(
    r"[A-Za-z_]\w*|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|0[xX][0-9a-fA-F]+|\d+[uU]?|\s+|.",
    re.S,
)
INT = re.compile(r"\d+")
NUMBERED = re.compile(r"[A-Za-z_]\w*\d")  # a name ending in a digit: the emitter's locals
BUILTIN = re.compile(r"(?:[biu]?vec[234]|mat[234](?:x[234])?|[iu]?sampler[23]D|log2|exp2|(?:un)?pack\w+2x16)")
DECLARED = re.compile(r"\b(?:uniform|in|out)\s+(?:\w+\s+)*?(\w+)\s*(?:\[[^\]]*\])?\s*;")
LENGTH = re.compile(rf"^uniform int {UNIFORM}\[(\d+)\];$", re.M)
USE = re.compile(rf"\b{UNIFORM}\[(\d+)\]")


def code_of(text: str) -> str:
    """A shader without its // comments (which name the kernel and its tensors)."""
    return COMMENT.sub("", text)


def _shape(code: str) -> tuple[tuple, list[int]] | None:
    """The code's tokens with its local names renamed in order of appearance and the integer
    literals that may become uniforms (inside a function, outside [] and const statements)
    replaced by None, and those literals; None for a code that already uses the names."""
    if re.search(rf"\b(?:{LOCAL}\d+|{UNIFORM})\b", code):
        return None
    keep = set(DECLARED.findall(code))
    names: dict[str, str] = {}
    tokens, literals = [], []
    depth = brackets = 0
    const = False
    for t in TOKEN.findall(code):
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
        elif t == "[":
            brackets += 1
        elif t == "]":
            brackets -= 1
        elif t == ";":
            const = False
        elif t == "const":
            const = True
        if NUMBERED.fullmatch(t) and t not in keep and not BUILTIN.fullmatch(t):
            t = names.setdefault(t, f"{LOCAL}{len(names)}")
        elif INT.fullmatch(t) and depth > 0 and not brackets and not const:
            tokens.append(None)
            literals.append(int(t))
            continue
        tokens.append(t)
    return tuple(tokens), literals


def _template(tokens: tuple, columns: list[list[int]]) -> tuple[str, list[int]]:
    """The template's text and the literal columns its dlc_k elements hold (those the members
    agree on are written in)."""
    lifted: list[int] = []  # a column per dlc_k element (columns equal in every member share one)
    at: dict[int, int] = {}
    first: dict[tuple, int] = {}
    for i, col in enumerate(columns):
        if len(set(col)) > 1:
            at[i] = first.setdefault(tuple(col), len(lifted))
            if at[i] == len(lifted):
                lifted.append(i)
    out, column = [], 0
    for t in tokens:
        if t is None:
            out.append(f"{UNIFORM}[{at[column]}]" if column in at else str(columns[column][0]))
            column += 1
        else:
            out.append(t)
    text = "".join(out)
    if not lifted:  # the members differ in their local names alone
        return text, lifted
    lines = text.split("\n")
    after = max((i for i, line in enumerate(lines) if line.startswith(("precision ", "#version"))), default=-1)
    lines.insert(after + 1, f"uniform int {UNIFORM}[{len(lifted)}];")
    return "\n".join(lines), lifted


def make(sources: dict[str, str]) -> dict:
    """The bundle of `sources` (shader file -> its text)."""
    codes: dict[str, list[str]] = {}  # distinct code -> its files
    for file, text in sources.items():
        codes.setdefault(code_of(text), []).append(file)
    groups: dict[tuple, list[tuple[str, list[int]]]] = defaultdict(list)
    alone = []
    for code in codes:
        shape = _shape(code)
        if shape is None:
            alone.append(code)
        else:
            groups[shape[0]].append((code, shape[1]))
    programs: list[str] = []
    passes: dict[str, list] = {}

    def add(text: str, members: list[tuple[str, list[int]]]) -> None:
        programs.append(text)
        for code, ints in members:
            for file in codes[code]:
                passes[file] = [len(programs) - 1, ints]

    for tokens, members in groups.items():
        columns = [list(col) for col in zip(*(lits for _, lits in members))]
        varying = sum(len(set(col)) > 1 for col in columns)
        if len(members) == 1 or varying > MAX_LIFTED:
            alone.extend(code for code, _ in members)
            continue
        text, lifted = _template(tokens, columns)
        add(text, [(code, [lits[c] for c in lifted]) for code, lits in members])
    for code in alone:
        add(code, [(code, [])])
    return {"format": FORMAT, "programs": programs, "passes": dict(sorted(passes.items()))}


def expand(bundle: dict, file: str) -> str:
    """The code pass `file` runs: its program's text with dlc_k[i] written as its i-th int."""
    index, ints = bundle["passes"][file]
    text = LENGTH.sub("", bundle["programs"][index], count=1)
    return USE.sub(lambda m: str(ints[int(m.group(1))]), text)


def dumps(bundle: dict) -> str:
    return json.dumps(bundle, separators=(",", ":")) + "\n"


def check(raw: bytes, files: set[str], where: str) -> dict:
    """The bundle in `raw` (the file's bytes) read as untrusted input: JSON of the layout
    above, every file of `files` (the shader files the manifest names) and no other, program
    indices in range, each pass's ints as many as its program's dlc_k and each a whole number
    in [0, 2^31). A problem is a DataError naming the entry."""
    if len(raw) > MAX_BYTES:
        raise DataError(f"{where} holds {len(raw)} bytes, more than the {MAX_BYTES} a shader bundle may")
    try:
        b = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{where} is not JSON: {e}") from None

    def fail(field: str, problem: str):
        raise DataError(f"{where}: {field}: {problem}")

    if not isinstance(b, dict) or b.get("format") != FORMAT:
        raise DataError(f"{where} is not a dlc shader bundle of format {FORMAT}")
    programs, passes = b.get("programs"), b.get("passes")
    if not isinstance(programs, list) or not programs:
        fail("programs", "must be a list of shader texts")
    if not isinstance(passes, dict):
        fail("passes", "must be an object (shader file -> [program, ints])")
    lengths = []
    for i, text in enumerate(programs):
        if not isinstance(text, str) or not text:
            fail(f"programs[{i}]", "must be a shader's text")
        if len(text) > MAX_PROGRAM_CHARS:
            fail(f"programs[{i}]", f"holds {len(text)} characters, more than the {MAX_PROGRAM_CHARS} a shader may")
        m = LENGTH.findall(text)
        n = int(m[0]) if m else 0
        reads = [int(k) for k in USE.findall(LENGTH.sub("", text))]
        if len(m) > 1 or (m and not 0 < n <= MAX_LIFTED) or any(k >= n for k in reads):
            why = f"may declare {UNIFORM}[n] once, 0 < n <= {MAX_LIFTED}, and read its n elements alone"
            fail(f"programs[{i}]", why)
        lengths.append(n)
    for file in sorted(files - set(passes)):
        fail("passes", f"has no shader '{file}' (a pass of the manifest's programs)")
    for file, entry in passes.items():
        if file not in files:
            fail(f"passes.{file}", "is not a shader file of the manifest's programs")
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
            fail(f"passes.{file}", "must be [program, ints]")
        index, ints = entry
        if not (type(index) is int and 0 <= index < len(programs)):
            fail(f"passes.{file}", f"program {index!r} is not an index of programs (0 to {len(programs) - 1})")
        if len(ints) != lengths[index]:
            fail(f"passes.{file}", f"holds {len(ints)} ints, but programs[{index}] reads {lengths[index]}")
        for k, v in enumerate(ints):
            if not (type(v) is int and 0 <= v <= INT_MAX):
                fail(f"passes.{file}", f"int {k} is {v!r}, not a whole number from 0 to {INT_MAX}")
    return b
