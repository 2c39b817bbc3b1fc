"""Writes `py/wtxt/_rust.pyi`, the type stub of the compiled `wtxt._rust`
module, from the binding's Rust source (`src/*.rs`): every function and
class the module registers, with its parameters, defaults, types and doc
comment. `--check` fails when the stub on disk differs, so the stub cannot
drift from the binding.

    python3 python/stubgen.py [--check]
"""

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
STUB = HERE / "py" / "wtxt" / "_rust.pyi"

SCALARS = {
    "u8": "int", "u16": "int", "u32": "int", "u64": "int", "usize": "int", "i32": "int", "i64": "int",
    "f32": "float", "f64": "float", "bool": "bool", "String": "str", "str": "str", "OsString": "str",
    "std::ffi::OsString": "str", "PathBuf": "str | os.PathLike[str]", "()": "None",
    "Py<PyBytes>": "bytes", "Vec<u8>": "bytes", "[u8]": "bytes", "PyObject": "Any", "Bound<'_, PyAny>": "Any",
    "Py<PyArray1<u8>>": "npt.NDArray[np.uint8]", "numpy::PyReadwriteArray1<'py, u8>": "npt.NDArray[np.uint8]",
}


def split_top(text, sep=","):
    """`text` cut at `sep` outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def closing(text, at):
    """The index just past the bracket that closes the one at `at`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth = 0
    for i in range(at, len(text)):
        if text[i] in pairs:
            depth += 1
        elif text[i] in pairs.values():
            depth -= 1
            if depth == 0:
                return i + 1
    raise SystemExit(f"stubgen: unbalanced brackets at {at}")


class Binding:
    def __init__(self, text):
        self.text = text
        self.aliases = {m.group(1): m.group(2) for m in re.finditer(r"^(?:pub(?:\(crate\))? )?type (\w+)(?:<'\w+>)? = (.*?);\s*$", text, re.S | re.M)}
        self.classes = {}  # Rust name -> Python name
        for m in re.finditer(r'#\[pyclass\(name = "(\w+)"[^\]]*\]\s*(?:#\[derive\([^\]]*\)\]\s*)?(?:pub(?:\(crate\))? )?struct (\w+)', text):
            self.classes[m.group(2)] = m.group(1)
        self.dicts = [m.group(1) for m in re.finditer(r"#\[pyo3\(from_item_all\)\]\s*(?:pub(?:\(crate\))? )?struct (\w+)", text)]

    def py(self, t, arg=False):
        """The Python type of Rust type `t`."""
        t = re.sub(r"^&(?:'\w+ )?(?:mut )?", "", t.strip())
        t = re.sub(r"\s+", " ", t)
        for wrap in ("PyResult", "Result"):
            if t.startswith(wrap + "<"):
                return self.py(split_top(t[len(wrap) + 1:-1])[0], arg)
        if re.sub(r"<'\w+>$", "", t) in self.aliases:
            return self.py(self.aliases[re.sub(r"<'\w+>$", "", t)], arg)
        if t == "PathBuf" and not arg:
            return "str"
        if t in SCALARS:
            return SCALARS[t]
        if re.fullmatch(r"\[u8; \d+\]", t):
            return "list[int]"
        if t.startswith("Option<"):
            return self.py(t[7:-1], arg) + " | None"
        if t.startswith("Vec<"):
            return f"list[{self.py(t[4:-1], arg)}]"
        if t.startswith("Py<") and t[3:-1] in self.classes:
            return self.classes[t[3:-1]]
        if t.startswith("PyRef<"):
            return self.py(split_top(t[6:-1])[-1], arg)
        for m in ("BTreeMap<", "HashMap<", "std::collections::HashMap<"):
            if t.startswith(m):
                k, v = split_top(t[len(m):-1])
                return f"dict[{self.py(k, arg)}, {self.py(v, arg)}]"
        if t.startswith("(") and t.endswith(")"):
            return "tuple[" + ", ".join(self.py(x, arg) for x in split_top(t[1:-1])) + "]"
        if "::" in t and not t.startswith("std::"):
            return self.py(t.split("::")[-1], arg)
        if t in self.classes:
            return self.classes[t]
        if t in self.dicts:
            return "_" + t
        raise SystemExit(f"stubgen: no Python type for Rust type `{t}`")


def docs(text, end):
    """The `///` comment right above `end` (attributes between allowed)."""
    lines = text[: text.rfind("\n", 0, end) + 1].rstrip().split("\n")
    out = []
    for line in reversed(lines):
        s = line.strip()
        if s.startswith("#["):
            continue
        if not s.startswith("///"):
            break
        out.append(s[3:].strip())
    return " ".join(reversed(out)).replace("[`", "`").replace("`]", "`")


def functions(b, body, methods):
    """Each `fn` of `body` Python sees (every one of a `#[pymethods]` block,
    else those marked `#[pyfunction]`): (name, params, return, doc, is_new)."""
    out = []
    for m in re.finditer(r"((?:\s*#\[[^\n]*\]\n)*)\s*(?:pub(?:\(crate\))? )?fn (\w+)(?:<[^>(]*>)?\(", body):
        attrs, name = m.group(1), m.group(2)
        if not methods and "#[pyfunction]" not in attrs:
            continue
        open_at = m.end() - 1
        close = closing(body, open_at)
        ret = re.match(r"\s*->\s*(.*?)\s*(?:where|\{)", body[close:], re.S)
        ret_t = ret.group(1) if ret else "()"
        params = []
        sig = re.search(r"signature = \((.*)\)\)\]", attrs)
        defaults = {}
        if sig:
            for p in split_top(sig.group(1)):
                if "=" in p:
                    k, v = p.split("=", 1)
                    defaults[k.strip()] = v.strip()
        for a in split_top(body[open_at + 1:close - 1]):
            if a in ("&self", "self", "&mut self") or not a:
                continue
            pname, ptype = a.split(":", 1)
            pname = pname.strip()
            if "Python<" in ptype:
                continue
            params.append((pname, b.py(ptype, arg=True), defaults.get(pname)))
        out.append((name, params, ret_t, docs(body, m.start() + len(attrs)), "#[new]" in attrs))
    return out


def default(v):
    return {"None": "None", "false": "False", "true": "True", "Vec::new()": "..."}.get(v, v)


def signature(params, first=None):
    ps = [first] if first else []
    for n, t, d in params:
        ps.append(f"{n}: {t}" + (f" = {default(d)}" if d is not None else ""))
    return ", ".join(ps)


def doc_line(d, indent):
    return f'{indent}"""{d}"""\n' if d else ""


def render(text):
    b = Binding(text)
    registered = set(re.findall(r"wrap_pyfunction!\((?:\w+::)*(\w+), m\)", text))
    out = ['"""Types of `wtxt._rust`, the compiled core. Generated by python/stubgen.py from\n'
           'python/src; run it after changing the binding (the test suite checks)."""\n\n',
           "import os\nfrom typing import Any, TypedDict, final\n\nimport numpy as np\nimport numpy.typing as npt\n"
           "\n"]
    exc = re.search(r'create_exception!\(_rust, (\w+), PyException, "(.*?)"\)', text)
    out.append(f"class {exc.group(1)}(Exception):\n    \"\"\"{exc.group(2)}\"\"\"\n\n")
    for name in b.dicts:
        m = re.search(r"struct " + name + r" \{(.*?)\n\}", text, re.S)
        out.append(f"class _{name}(TypedDict):\n" + doc_line(docs(text, text.index(f"struct {name} {{")), "    "))
        for f in re.finditer(r"^\s+(?:pub(?:\(crate\))? )?(\w+): (.*?),\s*$", m.group(1), re.M):
            out.append(f"    {f.group(1)}: {b.py(f.group(2), arg=True)}\n")
        out.append("\n")
    for rust, pyname in sorted(b.classes.items(), key=lambda kv: kv[1]):
        decl = re.search(r"struct " + rust + r" \{(.*?)\n\}", text, re.S)
        out.append(f"@final\nclass {pyname}:\n" + doc_line(docs(text, text.index(f"struct {rust} {{")), "    "))
        head = text[max(0, decl.start() - 300):decl.start()]
        if "get_all" in head.split("#[pyclass")[-1]:
            for f in re.finditer(r"^\s+(?:pub(?:\(crate\))? )?(\w+): (.*?),\s*$", decl.group(1), re.M):
                d = docs(decl.group(1), f.start() + 1)
                out.append(f"    @property\n    def {f.group(1)}(self) -> {b.py(f.group(2))}:\n" + doc_line(d, "        ") + "        ...\n")
        impl = re.search(r"#\[pymethods\]\s*impl " + rust + r" \{", text)
        if impl:
            body = text[impl.end() - 1:closing(text, impl.end() - 1)]
            for name, params, ret, doc, new in functions(b, body, True):
                if new:
                    out.append(f"    def __new__({signature(params, 'cls')}) -> {pyname}:\n")
                else:
                    out.append(f"    def {name}({signature(params, 'self')}) -> {b.py(ret)}:\n")
                out.append(doc_line(doc, "        ") + "        ...\n")
        out.append("\n")
    exposed = sorted(f for f in functions(b, text, False) if f[0] in registered)
    names = sorted([exc.group(1)] + list(b.classes.values()) + [f[0] for f in exposed])
    out.append("__all__ = [" + ", ".join(f'"{n}"' for n in names) + "]\n\n")
    for name, params, ret, doc, _ in exposed:
        out.append(f"def {name}({signature(params)}) -> {b.py(ret)}:\n" + doc_line(doc, "    ") + "    ...\n\n")
    return "".join(out).rstrip() + "\n"


def main():
    text = "\n".join(p.read_text() for p in sorted(SRC.glob("*.rs")))
    stub = render(text)
    if "--check" in sys.argv[1:]:
        if not STUB.exists() or STUB.read_text() != stub:
            print(f"{STUB} differs from the binding: run python3 python/stubgen.py", file=sys.stderr)
            return 1
        return 0
    STUB.write_text(stub)
    return 0


if __name__ == "__main__":
    sys.exit(main())
