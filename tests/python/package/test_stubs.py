"""The typed stub (_core.pyi, the copy next to the imported extension: what type checkers and IDEs
read) matches the module it describes:

- the same public functions and classes (the stub's TypedDicts and type aliases aside);
- per class, the same public methods and properties, properties as properties, async methods
  as coroutine functions, and every dunder method the stub declares;
- per function and method, the same parameters: names, order, kinds (positional-only,
  keyword-only, *args) and default values, read from pybind11's signature line (the first line
  of __doc__, what help() shows) or, for methods written in Python, inspect.signature;
- the stub's docstrings begin the module's (so help() and the IDE tell the same story), and
  every public function, method and property of the module has a docstring;
- each TypedDict has exactly the keys of the dicts a real daemon's answers turn into (stat,
  list, put, stats with its pools and users entries, process_mappings).

Every failure names the function, the parameter or the key that differs, and how."""

import ast
import inspect
import pathlib
import re

import numpy as np
import pytest

import tensorbroker  # the package first: it attaches its Python-level methods to _core's classes
from tensorbroker import _core

STUB = pathlib.Path(_core.__file__).with_name("_core.pyi")
SOURCE_STUB = pathlib.Path(__file__).resolve().parents[3] / "python" / "tensorbroker" / "_core.pyi"

P = inspect.Parameter
KIND_NAMES = {
    P.POSITIONAL_ONLY: "positional-only",
    P.POSITIONAL_OR_KEYWORD: "positional-or-keyword",
    P.VAR_POSITIONAL: "*args",
    P.KEYWORD_ONLY: "keyword-only",
    P.VAR_KEYWORD: "**kwargs",
}
NO_DEFAULT = "<no default>"


# --- the stub ---------------------------------------------------------------------------------

def _is_typeddict(node):
    return isinstance(node, ast.ClassDef) and any(
        ast.unparse(base) in ("TypedDict", "typing.TypedDict") for base in node.bases)


def _is_property(node):
    return any(ast.unparse(d) == "property" for d in node.decorator_list)


class Stub:
    def __init__(self, path):
        assert path.exists(), f"no stub next to the module: {path} (CMake and the wheel put it there)"
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.functions = {}  # name -> FunctionDef / AsyncFunctionDef
        self.classes = {}  # name -> {member name -> FunctionDef / AsyncFunctionDef}
        self.class_nodes = {}
        self.typeddicts = {}  # name -> [keys]
        self.aliases = set()
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif _is_typeddict(node):
                self.typeddicts[node.name] = [n.target.id for n in node.body
                                              if isinstance(n, ast.AnnAssign)]
            elif isinstance(node, ast.ClassDef):
                self.class_nodes[node.name] = node
                members = {}
                for n in node.body:
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        assert n.name not in members, f"stub: {node.name}.{n.name} declared twice"
                        members[n.name] = n
                self.classes[node.name] = members
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.aliases.update(t.id for t in targets if isinstance(t, ast.Name))


@pytest.fixture(scope="module")
def stub():
    return Stub(STUB)


def _stub_default(node):
    return NO_DEFAULT if node is None else ast.unparse(node)


def stub_parameters(fn):
    """[(name, kind, default source text)] of a stub FunctionDef, in order."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = []
    for i, arg in enumerate(positional):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append((arg.arg, kind, _stub_default(defaults[i])))
    if a.vararg:
        params.append((a.vararg.arg, P.VAR_POSITIONAL, NO_DEFAULT))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append((arg.arg, P.KEYWORD_ONLY, _stub_default(default)))
    if a.kwarg:
        params.append((a.kwarg.arg, P.VAR_KEYWORD, NO_DEFAULT))
    return params


# --- the module -------------------------------------------------------------------------------

def _split_top_level(text, sep=","):
    """`text` split at `sep` outside brackets and quotes."""
    parts, current, depth, quote, i = [], [], 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            current.append(ch)
            if ch == "\\" and i + 1 < len(text):
                current.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in "([{<":
            depth += 1
            current.append(ch)
        elif ch in ")]}>" and not (ch == ">" and text[i - 1:i] == "-"):
            depth -= 1
            current.append(ch)
        elif ch == sep and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    tail = "".join(current).strip()
    if tail:
        parts.append(tail)
    return parts


def _pybind_signature_line(qualname, obj):
    doc = obj.__doc__ or ""
    first = doc.splitlines()[0] if doc else ""
    short = qualname.rsplit(".", 1)[-1]
    assert first.startswith(short + "("), (
        f"{qualname}: the first line of __doc__ is not pybind11's signature line: {first!r}")
    assert "Overloaded function" not in doc, f"{qualname}: overloaded; the stub needs @overload"
    return first


def pybind_parameters(qualname, obj):
    """[(name, kind, default source text)] from pybind11's signature line, e.g.
    "get(self: tensorbroker._core.Client, name: str, timeout: Optional[float] = None, *, ...)"."""
    line = _pybind_signature_line(qualname, obj)
    open_at = line.index("(")
    depth, close_at = 0, None
    for i in range(open_at, len(line)):
        if line[i] in "([":
            depth += 1
        elif line[i] in ")]":
            depth -= 1
            if depth == 0:
                close_at = i
                break
    assert close_at is not None, f"{qualname}: unbalanced signature line {line!r}"
    params, kind = [], P.POSITIONAL_OR_KEYWORD
    entries = _split_top_level(line[open_at + 1:close_at])
    if "/" in entries:  # everything before it is positional-only
        cut = entries.index("/")
        entries = [("/", e) for e in entries[:cut]] + entries[cut + 1:]
    for entry in entries:
        positional_only = isinstance(entry, tuple)
        if positional_only:
            entry = entry[1]
        if entry == "*":
            kind = P.KEYWORD_ONLY
            continue
        if entry.startswith("**"):
            params.append((entry[2:].split(":")[0].strip(), P.VAR_KEYWORD, NO_DEFAULT))
            continue
        if entry.startswith("*"):
            params.append((entry[1:].split(":")[0].strip(), P.VAR_POSITIONAL, NO_DEFAULT))
            kind = P.KEYWORD_ONLY
            continue
        match = re.fullmatch(r"(\w+)(?:\s*:\s*(.*?))?(?:\s+=\s+(.*))?", entry)
        assert match, f"{qualname}: cannot read parameter {entry!r} of {line!r}"
        name, _, default = match.groups()
        params.append((name, P.POSITIONAL_ONLY if positional_only else kind,
                       NO_DEFAULT if default is None else default))
    return params


def python_parameters(fn):
    """[(name, kind, default repr)] of a function written in Python."""
    return [(p.name, p.kind, NO_DEFAULT if p.default is P.empty else repr(p.default))
            for p in inspect.signature(fn).parameters.values()]


def is_pybind(obj):
    return type(obj).__name__ in ("builtin_function_or_method", "instancemethod")


def module_parameters(qualname, obj):
    return pybind_parameters(qualname, obj) if is_pybind(obj) else python_parameters(obj)


def _same_default(stub_text, module_text):
    if stub_text == NO_DEFAULT or module_text == NO_DEFAULT:
        return stub_text == module_text
    try:
        return ast.literal_eval(stub_text) == ast.literal_eval(module_text) and \
            type(ast.literal_eval(stub_text)) is type(ast.literal_eval(module_text))
    except (ValueError, SyntaxError):
        return stub_text == module_text


def compare_parameters(qualname, stub_params, module_params):
    """A list of sentences, one per difference (empty: they agree)."""
    problems = []
    stub_names = [p[0] for p in stub_params]
    module_names = [p[0] for p in module_params]
    if stub_names != module_names:
        missing = [n for n in module_names if n not in stub_names]
        extra = [n for n in stub_names if n not in module_names]
        what = []
        if missing:
            what.append(f"the stub lacks {missing}")
        if extra:
            what.append(f"the module has no {extra}")
        if not what:
            what.append("in another order")
        problems.append(f"{qualname}: parameters differ ({'; '.join(what)}): "
                        f"stub ({', '.join(stub_names)}), module ({', '.join(module_names)})")
        return problems
    for (name, skind, sdefault), (_, mkind, mdefault) in zip(stub_params, module_params):
        if skind != mkind:
            problems.append(f"{qualname}({name}): {KIND_NAMES[skind]} in the stub, "
                            f"{KIND_NAMES[mkind]} in the module")
        if not _same_default(sdefault, mdefault):
            problems.append(f"{qualname}({name}): default {sdefault} in the stub, "
                            f"{mdefault} in the module")
    return problems


def public_module_names():
    names = {}
    for name, obj in vars(_core).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(obj) or callable(obj):
            names[name] = obj
    return names


def class_members(cls):
    """The attributes the class itself defines (not object's): {name: static attribute}."""
    return {name: value for name, value in vars(cls).items()
            if name not in ("__doc__", "__module__", "__dict__", "__weakref__", "__init__")
            or (name == "__init__" and (is_pybind(value) or inspect.isfunction(value)))}


def _doc_body(obj, pybind):
    doc = inspect.getdoc(obj) or ""
    if pybind:  # drop pybind11's signature line
        doc = "\n".join(doc.splitlines()[1:])
    return " ".join(doc.split())


# --- the checks -------------------------------------------------------------------------------

def test_the_stub_next_to_the_module_is_the_source_one():
    if not SOURCE_STUB.exists():
        pytest.skip(f"no source tree at {SOURCE_STUB.parents[2]}")
    assert STUB.read_text() == SOURCE_STUB.read_text(), (
        f"{STUB} differs from {SOURCE_STUB}: rebuild (CMake copies it) or reinstall the package")


def test_top_level_names(stub):
    module = set(public_module_names())
    declared = set(stub.functions) | set(stub.classes)
    assert not module - declared, f"in tensorbroker._core but not in the stub: {sorted(module - declared)}"
    assert not declared - module, f"in the stub but not in tensorbroker._core: {sorted(declared - module)}"
    for name in stub.classes:
        assert inspect.isclass(getattr(_core, name)), f"{name}: a class in the stub, not in the module"
    for name in stub.functions:
        assert not inspect.isclass(getattr(_core, name)), f"{name}: a function in the stub, a class in the module"


def test_class_members(stub):
    problems = []
    for cls_name, declared in stub.classes.items():
        cls = getattr(_core, cls_name)
        members = class_members(cls)
        public = {n for n in members if not n.startswith("_")}
        # Dunders: each one the stub declares must be the module's; each protocol method the
        # module binds itself (not __repr__, which every object has) must be declared.
        dunders = {n for n in members if n.startswith("__") and n != "__repr__"}
        stub_public = {n for n in declared if not n.startswith("_")}
        stub_dunders = {n for n in declared if n.startswith("__")}
        for name in sorted(public - stub_public):
            problems.append(f"{cls_name}.{name}: in the module, not in the stub")
        for name in sorted(stub_public - public):
            problems.append(f"{cls_name}.{name}: in the stub, not in the module")
        for name in sorted(stub_dunders - set(members)):
            problems.append(f"{cls_name}.{name}: declared in the stub, not defined by the module")
        for name in sorted(dunders - stub_dunders):
            problems.append(f"{cls_name}.{name}: defined by the module, not declared in the stub")
        for name in sorted(set(declared) & set(members)):
            node, value = declared[name], members[name]
            if _is_property(node) != isinstance(value, property):
                problems.append(f"{cls_name}.{name}: "
                                + ("a property in the stub, a method in the module"
                                   if _is_property(node) else
                                   "a method in the stub, a property in the module"))
            is_async = isinstance(node, ast.AsyncFunctionDef)
            if not isinstance(value, property) and is_async != inspect.iscoroutinefunction(value):
                problems.append(f"{cls_name}.{name}: "
                                + ("async def in the stub, not a coroutine function in the module"
                                   if is_async else
                                   "a coroutine function in the module, plain def in the stub"))
    assert not problems, "\n".join(problems)


def test_parameters(stub):
    problems = []
    for name, node in stub.functions.items():
        fn = getattr(_core, name, None)
        if fn is not None:
            if isinstance(node, ast.AsyncFunctionDef) != inspect.iscoroutinefunction(fn):
                problems.append(f"{name}: async in one of stub and module only")
            problems += compare_parameters(name, stub_parameters(node), module_parameters(name, fn))
    for cls_name, declared in stub.classes.items():
        members = class_members(getattr(_core, cls_name, object))
        for name, node in declared.items():
            value = members.get(name)
            if value is None or isinstance(value, property) or _is_property(node):
                continue  # test_class_members reports these
            qualname = f"{cls_name}.{name}"
            problems += compare_parameters(qualname, stub_parameters(node),
                                           module_parameters(qualname, value))
    assert not problems, "\n".join(problems)


def test_docstrings(stub):
    """help() and the stub agree: a stub docstring is the start of the module's (whitespace
    aside); every public function, method and class of the module has one (properties may go
    without, where the stub has none either)."""
    problems = []

    def check(qualname, node, obj, pybind, required=True):
        body = _doc_body(obj, pybind)
        declared = ast.get_docstring(node) if node is not None else None
        if not body:
            if required or declared is not None:
                problems.append(f"{qualname}: no docstring in the module (help() shows none)"
                                + (f", the stub says {declared!r}" if declared else ""))
            return
        if declared is not None:
            declared = " ".join(declared.split())
            if not body.startswith(declared):
                problems.append(f"{qualname}: the stub says {declared!r}, "
                                f"help() says {body[:len(declared) + 40]!r}")

    for name, node in stub.functions.items():
        if hasattr(_core, name):
            fn = getattr(_core, name)
            check(name, node, fn, is_pybind(fn))
    for cls_name, declared in stub.classes.items():
        cls = getattr(_core, cls_name, None)
        if cls is None:
            continue
        check(cls_name, stub.class_nodes[cls_name], cls, False)
        for name, value in class_members(cls).items():
            node = declared.get(name)
            if name.startswith("_") and (node is None or ast.get_docstring(node) is None):
                continue  # dunders: checked where the stub documents them
            if isinstance(value, property):
                check(f"{cls_name}.{name}", node, value, False, required=False)
            else:
                check(f"{cls_name}.{name}", node, value, is_pybind(value))
    assert not problems, "\n".join(problems)


def _keys_problem(what, stub_keys, answer):
    stub_keys, module_keys = set(stub_keys), set(answer)
    parts = []
    if module_keys - stub_keys:
        parts.append(f"the module's answer has {sorted(module_keys - stub_keys)}, the stub not")
    if stub_keys - module_keys:
        parts.append(f"the stub has {sorted(stub_keys - module_keys)}, the module's answer not")
    return f"{what}: " + "; ".join(parts) if parts else None


def test_typeddicts_have_the_keys_of_real_answers(stub, client):
    td = stub.typeddicts
    for name in ("TensorStat", "BrokerStats", "PoolStats", "UserUsage", "ProcessMappings"):
        assert name in td, f"the stub has no TypedDict {name}"
    published = client.put("stubs/x", np.arange(6, dtype=np.float32).reshape(2, 3), replace=True)
    held = client.get("stubs/x", timeout=0)
    try:
        stats = client.stats()
        assert stats["pools"] and stats["users"], stats  # entries to check
        answers = [
            ("TensorStat vs put()", td["TensorStat"], published),
            ("TensorStat vs stat()", td["TensorStat"], client.stat("stubs/x")),
            ("TensorStat vs list()[0]", td["TensorStat"], client.list("stubs/")[0]),
            ("BrokerStats vs stats()", td["BrokerStats"], stats),
            ("ProcessMappings vs process_mappings()", td["ProcessMappings"],
             tensorbroker.process_mappings()),
        ]
        answers += [(f"PoolStats vs stats()['pools'][{i}]", td["PoolStats"], pool)
                    for i, pool in enumerate(stats["pools"])]
        answers += [(f"UserUsage vs stats()['users'][{i}]", td["UserUsage"], user)
                    for i, user in enumerate(stats["users"])]
        problems = [p for p in (_keys_problem(*a) for a in answers) if p]
        assert not problems, "\n".join(problems)
    finally:
        held.release()
        client.delete("stubs/x")


DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md"
DOCUMENTED_DUNDERS = {"__dlpack__", "__dlpack_device__", "__array__"}


def _doc_signatures(text):
    """{name: [ast.FunctionDef]} of every `name(params) -> ret` span and `def`/`async def` line
    in the Markdown `text`, parsed as Python (spans that are not Python are skipped)."""
    found = {}
    spans = re.findall(r"`(\w+\([^`]*\)(?: -> [^`]+)?)`", text)
    spans += re.findall(r"^(?:async )?def (\w+\(.*\)(?: -> [^#]+?)?)(?:\s+#.*)?$", text, re.M)
    for span in spans:
        try:
            node = ast.parse(f"def {span}: ...").body[0]
        except SyntaxError:
            continue
        found.setdefault(node.name, []).append(node)
    return found


def _render(fn, drop_self):
    args = ast.unparse(fn.args)
    if drop_self:
        args = re.sub(r"^self(, )?", "", args)
    return f"{fn.name}({args})" + (f" -> {ast.unparse(fn.returns)}" if fn.returns else "")


def test_docs_python_md_shows_the_stubs_signatures(stub):
    """docs/python.md gives every public function, method and property with the stub's exact
    signature (names, annotations, defaults, return type)."""
    if not DOCS.exists():
        pytest.skip(f"no {DOCS}")
    text = DOCS.read_text()
    documented = _doc_signatures(text)
    problems = []

    def check(qualname, node, method):
        want = _render(node, drop_self=method)
        for candidate in documented.get(node.name, []):
            if _render(candidate, drop_self=method) == want:
                return
        shown = sorted({_render(c, drop_self=method) for c in documented.get(node.name, [])})
        problems.append(f"{qualname}: docs/python.md lacks `{want}`"
                        + (f"; it shows {shown}" if shown else ""))

    for name, node in stub.functions.items():
        check(name, node, method=False)
    for cls_name, members in stub.classes.items():
        for name, node in members.items():
            if name.startswith("_") and name not in DOCUMENTED_DUNDERS:
                continue
            if _is_property(node):
                want = f"`{name}: {ast.unparse(node.returns)}`"
                if want not in text:
                    problems.append(f"{cls_name}.{name}: docs/python.md lacks the property {want}")
            else:
                check(f"{cls_name}.{name}", node, method=True)
    assert not problems, "\n".join(problems)


# --- the checker itself -----------------------------------------------------------------------

def test_the_checks_see_a_difference():
    """The comparison reports what it should, so a pass above means agreement."""
    fn = ast.parse("def get(self, name: str, timeout: float = 5.0, *, pinned: bool = False)"
                   " -> None: ...").body[0]

    class Fake:
        __doc__ = ("get(self: tensorbroker._core.Client, name: str, timeout: Optional[float] = "
                   "None, pinned: bool = False, device: object = None) -> tensorbroker._core.Tensor")
    problems = compare_parameters("Client.get", stub_parameters(fn), pybind_parameters("Client.get", Fake))
    assert problems == ["Client.get: parameters differ (the stub lacks ['device']): stub (self, "
                        "name, timeout, pinned), module (self, name, timeout, pinned, device)"]

    class Fake2:
        __doc__ = ("get(self: X, name: str, timeout: float = None, pinned: bool = False, "
                   "*, spare: Dict[str, int] = {'a': 1}) -> None")
    fn2 = ast.parse("def get(self, name, timeout=5.0, *, pinned=False, spare={'a': 1}): ...").body[0]
    problems = compare_parameters("f", stub_parameters(fn2), pybind_parameters("get", Fake2))
    assert problems == ["f(timeout): default 5.0 in the stub, None in the module",
                        "f(pinned): keyword-only in the stub, positional-or-keyword in the module"]
    assert _same_default("''", "''") and _same_default("0", "0")
    assert not _same_default("False", "0")  # bool vs int
