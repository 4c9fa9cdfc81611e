"""The house rules, checked by kept tools: layers (import-linter reads every import, function-level and
TYPE_CHECKING ones included), no import cycle, file names that say what a module holds, file sizes, a small top level
whose ``dir()`` is its ``__all__``, no function that nothing calls, and a light ``import fastdist_lab``. Each rule has
a test that breaks a copy of the package and sees the rule report it."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import typing
from collections.abc import Collection
from pathlib import Path

import pytest

import fastdist_lab

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fastdist_lab"
MAX_LINES = 500


def _lint(source_root: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run import-linter with the project's contracts on the package found under ``source_root``."""
    env = dict(os.environ, PYTHONPATH=str(source_root))
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_layers_contract_is_kept():
    result = _lint(REPO / "src", REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout  # the layers of the package, and of cost inside it


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("layout.py", "from .viz import plot_layout"),  # core -> viz
        ("streams/stream_report.py", "from ..runtime import LocalCluster"),  # streams -> runtime
        ("conventions/megatron.py", "from ..streams import predict"),  # independent siblings
        ("runtime/results.py", "from ..checks import check_layout"),  # runtime -> checks
        ("setup/training.py", "from ..cost import estimate"),  # the vocabulary -> the formulas
        ("cost/formulas/step.py", "from ..evidence.trust import band_for"),  # the formulas -> the evidence
        ("cost/evidence/accuracy.py", "from ..cost_report import estimate"),  # the evidence -> the report
        ("cost/step_time.py", "from .search import search"),  # the report -> the search
    ],
)
def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path, module, upward):
    shutil.copytree(REPO / "src", tmp_path / "src")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "src" / "fastdist_lab" / module
    target.write_text(
        target.read_text()
        + textwrap.dedent(f"""

        def _reaches_up():
            {upward}
        """)
    )
    result = _lint(tmp_path / "src", tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and ", 0 broken" not in result.stdout  # one contract or both (cost's, through it)


def test_no_module_of_the_package_is_over_500_lines():
    sizes = {path.relative_to(PACKAGE): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert sizes, "no modules found"
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def test_importing_the_package_stays_light():
    code = (
        "import sys, fastdist_lab; "
        "heavy = sorted(m for m in ('torch', 'matplotlib', 'ipywidgets', 'pandas') if m in sys.modules); "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_python_from_the_clones_parent_imports_the_installed_package(tmp_path):
    # A clone named like the package, seen from its parent: with the src/ layout its root holds no package
    # folder that could shadow the installed one (it is at most a namespace-package candidate, which loses).
    clone = tmp_path / "fastdist_lab"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, clone / name)
    shutil.copytree(REPO / "src", clone / "src")
    out = subprocess.run(
        [sys.executable, "-c", "import fastdist_lab, fastdist_lab.layout; print(fastdist_lab.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert Path(out.stdout.strip()).resolve().parent == PACKAGE.resolve()


# ---------------------------------------------------------------------------------------------------- structure
# Faults import-linter does not see, read from the package's source (nothing of the package is imported): an import
# cycle inside one layer, two modules sharing a file name, a function defined and used nowhere.


def _modules(package: Path) -> dict[str, Path]:
    """Every module of the package at ``package`` by dotted name (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package.name, *parts])] = path
    return out


@functools.lru_cache(maxsize=4)
def _trees(package: Path) -> dict[str, tuple[Path, ast.Module]]:
    """Every module of the package at ``package`` parsed (once per folder: each broken copy is a folder of its own,
    written before it is read). Readers never change the trees."""
    return {name: (path, ast.parse(path.read_text(), str(path))) for name, path in _modules(package).items()}


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _executed(node: ast.AST):
    """Every node that can run: the whole module, imports inside functions included, but not ``if TYPE_CHECKING``."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            for statement in child.orelse:
                yield statement
                yield from _executed(statement)
            continue
        yield child
        yield from _executed(child)


def _imported_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name a ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    if path.name != "__init__.py":
        parts.pop()
    parts = parts[: len(parts) - node.level + 1]
    return ".".join(parts + ([node.module] if node.module else []))


MODULE_STRING = re.compile(r"^(\.*)([A-Za-z_][\w.]*)?$")
"""A string that may name a module: ``"fastdist_lab.viz"``, ``".runtime"``, ``"..errors"``."""


def _named_module(module: str, path: Path, text: str, trees: dict) -> str | None:
    """The package module a string names, as ``importlib.import_module(text, package)`` and the lazy tables
    (``lazy.lazy_attributes``) read it (relative to the module's package), or ``None``."""
    match = MODULE_STRING.match(text)
    if not match or not text.strip("."):
        return None
    dots, rest = match.groups()
    if not dots:
        return text if text in trees and "." in text else None  # the root package's own name is no import
    name = _imported_base(module, path, ast.ImportFrom(module=rest, names=[], level=len(dots)))
    return name if name in trees else None


def _strings(node: ast.AST):
    """The whole string constants under ``node`` that code reads: no docstring, no piece of an f-string."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Expr) and isinstance(child.value, ast.Constant):
            continue  # a docstring (of a module, a class, a function or an attribute)
        if isinstance(child, ast.JoinedStr):
            continue
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child.value
        yield from _strings(child)


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at its top or inside a function (a name imported from a package is
    an edge to the package, or to its submodule when it names one). A string naming a package module is an import
    too: ``importlib.import_module("fastdist_lab.x")`` / ``import_module(".x", package)`` and the lazy tables of
    ``lazy.lazy_attributes`` (a name served on first use, a subpackage, an old name) import it when read."""
    trees = _trees(package)
    graph: dict[str, set[str]] = {name: set() for name in trees}
    for name, (path, tree) in trees.items():
        for node in _executed(tree):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in trees}
            elif isinstance(node, ast.ImportFrom):
                base = _imported_base(name, path, node)
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in trees else base
                    if target in trees:
                        graph[name].add(target)
        graph[name] |= _lazy_edges(name, path, tree, trees)
        graph[name].discard(name)
    return graph


def _lazy_edges(module: str, path: Path, tree: ast.Module, trees: dict) -> set[str]:
    """The modules ``module`` imports by name at run time: every string naming one, and each ``submodules`` entry of
    a ``lazy_attributes`` call (a bare name, relative to the package)."""
    edges = {target for text in _strings(tree) if (target := _named_module(module, path, text, trees))}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) == "lazy_attributes":
            for keyword in call.keywords:
                if keyword.arg == "submodules":
                    names = [c.value for c in ast.walk(keyword.value) if isinstance(c, ast.Constant)]
                    edges |= {f"{module}.{n}" for n in names if isinstance(n, str) and f"{module}.{n}" in trees}
    return edges


def _layers(pyproject: Path) -> list[list[set[str]]]:
    """The layers of ``[tool.importlinter]``, top first: each a list of groups of siblings that may import each other
    (``:``); groups of one layer (``|``) are independent."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the backport the project depends on there
        import tomli as tomllib

    contract = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"][0]
    return [
        [{name.strip(" ()") for name in group.split(":")} for group in layer.split("|")] for layer in contract["layers"]
    ]


def layer_violations(package: Path, pyproject: Path) -> list[str]:
    """Every import (``_import_graph``: statements anywhere, ``import_module`` strings, lazy tables) from a module to
    one of a higher layer, or to an independent sibling: ``"importer -> imported"``. The root ``__init__`` is the
    container, in no layer."""
    where = {}
    for index, layer in enumerate(_layers(pyproject)):
        for group_index, group in enumerate(layer):
            for name in group:
                where[name] = (index, group_index)

    def place(module: str) -> tuple[int, int] | None:
        parts = module.split(".")
        return where.get(parts[1]) if len(parts) > 1 else None

    out = []
    for importer, imported in sorted(_import_graph(package).items()):
        for target in sorted(imported):
            low, high = place(importer), place(target)
            if low is None or high is None or importer.split(".")[1] == target.split(".")[1]:
                continue
            if high[0] < low[0] or (high[0] == low[0] and high[1] != low[1]):
                out.append(f"{importer} -> {target}")
    return out


def import_cycles(package: Path) -> list[list[str]]:
    """The package's import cycles: each a sorted list of modules that import one another (directly or not). An
    import inside a function counts: it only defers the cycle to the first call."""
    graph = _import_graph(package)

    def reachable(start: str) -> set[str]:
        seen, todo = set(), list(graph[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo.extend(graph[node])
        return seen

    reach = {name: reachable(name) for name in graph}
    cycles = {tuple(sorted(m for m in reach[name] if name in reach[m])) for name in graph if name in reach[name]}
    return sorted(map(list, cycles))


def _stem(name: str) -> str:
    """A file name reduced to its word: ``workers`` and ``worker``, ``verification`` and ``verify`` are one."""
    for long, short in (("ification", "ify"), ("ation", "ate"), ("ies", "y"), ("s", "")):
        if name.endswith(long) and len(name) > len(long) + 2:
            return name[: -len(long)] + short
    return name


SUBCOMMAND = ("add_arguments", "run")
"""What a sub-command module of ``commands/`` defines; ``cli`` calls them through its table of modules."""


def _is_subcommand(tree: ast.Module) -> bool:
    """A module of ``commands/`` named after its sub-command: it defines ``add_arguments`` and ``run``."""
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return set(SUBCOMMAND) <= defined


def repeated_module_names(package: Path) -> dict[str, list[str]]:
    """File names (as words, see ``_stem``) that two modules share, or that a module shares with a subpackage."""
    by_stem: dict[str, list[str]] = {}
    for path, tree in _trees(package).values():
        if path == package / "__init__.py" or path.name == "__main__.py":
            continue
        if path.parent.name == "commands" and _is_subcommand(tree):
            continue
        stem = path.parent.name if path.name == "__init__.py" else path.stem
        by_stem.setdefault(_stem(stem), []).append(str(path.relative_to(package)))
    return {stem: paths for stem, paths in sorted(by_stem.items()) if len(paths) > 1}


# ---------------------------------------------------------------------------------------------------- unused functions
FRAMEWORK_DECORATORS = ("traitlets",)
"""Modules whose decorators register a method with a framework that calls it (traitlets' ``observe``, ``validate``)."""

DISPLAY_HOOK = re.compile(r"^_(repr_\w+|ipython_\w+)_$")
"""IPython's display protocol (``_repr_html_``, ``_repr_png_``, ``_ipython_display_``): called by the notebook."""


class _Names:
    """What one module's names stand for: local name -> (module, attribute or None), from its import statements."""

    def __init__(self, module: str, path: Path, tree: ast.Module):
        self.aliases: dict[str, tuple[str, str | None]] = {}
        self.classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = (alias.name, None)
                    else:
                        root = alias.name.split(".")[0]
                        self.aliases[root] = (root, None)
            elif isinstance(node, ast.ImportFrom):
                base = _imported_base(module, path, node)
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = (base, alias.name)


class _Hierarchy:
    """Resolves a class's bases, through the package's own classes, to the outside classes it inherits from."""

    def __init__(self, package: Path, trees: dict[str, tuple[Path, ast.Module]]):
        self.package = package.name
        self.names = {module: _Names(module, path, tree) for module, (path, tree) in trees.items()}

    def outside_bases(self, module: str, node: ast.ClassDef, depth: int = 0) -> list[object]:
        """The classes from outside the package that ``node`` inherits from (``None`` for one not known statically)."""
        out: list[object] = []
        for base in node.bases:
            out.extend(self._resolve(module, base, depth))
        return out

    def _resolve(self, module: str, expr: ast.expr, depth: int) -> list[object]:
        if depth > 20:
            return [None]
        chain: list[str] = []
        while isinstance(expr, ast.Attribute):
            chain.insert(0, expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return [None]
        names = self.names[module]
        if not chain and expr.id in names.classes:
            return self.outside_bases(module, names.classes[expr.id], depth + 1)
        if expr.id not in names.aliases:
            return [None]  # a class known only at run time (a parameter, a builtin such as ValueError)
        target, attribute = names.aliases[expr.id]
        chain = ([attribute] if attribute else []) + chain
        if target == self.package or target.startswith(self.package + "."):
            while chain and f"{target}.{chain[0]}" in self.names:
                target = f"{target}.{chain.pop(0)}"
            if len(chain) != 1 or target not in self.names:
                return [None]
            return self._resolve(target, ast.Name(chain[0]), depth + 1)
        try:
            value: object = importlib.import_module(target)
            for part in chain:
                value = getattr(value, part)
        except (ImportError, AttributeError):
            return [None]
        return [value]


PACKAGE_USE, LOCAL_USE, ATTRIBUTE_USE = "package", "local", "attribute"
"""How a name is used: through an import of the package (``from .x import f``, ``x.f`` on a package module, an
``__all__`` entry, ``getattr(module, "f")``), by a bare name in the module itself, or as any object's attribute."""

NAME_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


class _Reader(ast.NodeVisitor):
    """Collects every function definition and every use of a name, with how it is used (``PACKAGE_USE``, ...) and the
    functions each use sits in. A string is a use only as an ``__all__`` entry (or a key of a table spread into one) or
    the name given to ``getattr`` and its kin; docstrings, messages and f-strings say nothing."""

    def __init__(self, module: str, names: _Names, modules: Collection[str], tree: ast.Module):
        self.module = module
        self.names = names
        self.modules = modules
        self.tables = _top_level_values(tree)
        self.owners: list[ast.AST] = []
        self.definitions: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]] = []
        self.uses: dict[str, list[tuple[frozenset[int], str]]] = {}
        self.deprecated: set[int] = set()

    def _use(self, name: str, kind: str) -> None:
        functions = frozenset(id(o) for o in self.owners if not isinstance(o, ast.ClassDef))
        self.uses.setdefault(name, []).append((functions, kind))

    def _define(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        owner = self.owners[-1] if self.owners and isinstance(self.owners[-1], ast.ClassDef) else None
        self.definitions.append((self.module, node, owner))
        self.owners.append(node)
        self.generic_visit(node)
        self.owners.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _define

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.owners.append(node)
        self.generic_visit(node)
        self.owners.pop()

    def visit_Expr(self, node: ast.Expr) -> None:
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):  # docstrings say nothing
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            base, attribute = self.names.aliases.get(node.id, ("", None))
            if attribute is not None and _in_package(base, self.modules):
                self._use(attribute, PACKAGE_USE)  # from .x import f (as g): g() uses x's f
            self._use(node.id, LOCAL_USE)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self._use(node.attr, PACKAGE_USE if self._is_package_module(node.value) else ATTRIBUTE_USE)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(getattr(target, "id", None) == "__all__" for target in node.targets):
            self._all_entries(node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if getattr(node.target, "id", None) == "__all__":
            self._all_entries(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if getattr(node.func, "id", getattr(node.func, "attr", None)) == "warn_deprecated" and self.owners:
            self.deprecated.add(id(self.owners[-1]))  # the function that warns is an old spelling
        if getattr(node.func, "id", None) in NAME_FUNCTIONS and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self._use(name.value, PACKAGE_USE)
        self.generic_visit(node)

    def _all_entries(self, value: ast.expr) -> None:
        for element in getattr(value, "elts", ()):
            if isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
                table = self.tables.get(element.value.id)
                for key in getattr(table, "keys", None) or getattr(table, "elts", ()):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        self._use(key.value, PACKAGE_USE)
            elif isinstance(element, ast.Constant) and isinstance(element.value, str):
                self._use(element.value, PACKAGE_USE)

    def _is_package_module(self, expr: ast.expr) -> bool:
        """Whether ``expr`` is a module of the package (``x`` after ``from . import x``, ``fastdist_lab.x``)."""
        chain: list[str] = []
        while isinstance(expr, ast.Attribute):
            chain.insert(0, expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id not in self.names.aliases:
            return False
        base, attribute = self.names.aliases[expr.id]
        return ".".join([base, *([attribute] if attribute else []), *chain]) in self.modules


def _in_package(module: str, modules: Collection[str]) -> bool:
    return module.split(".")[0] == next(iter(modules), ".").split(".")[0]


def _top_level_values(tree: ast.Module) -> dict[str, ast.expr]:
    """A module's top-level ``name = value`` (annotated or not) assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def user_code(repo: Path) -> list[str]:
    """The code a user is shown: the notebooks' code cells and the README's code (spans and blocks)."""
    notebooks = [json.loads(path.read_text()) for path in sorted((repo / "notebooks").glob("*.ipynb"))]
    cells = ["".join(c["source"]) for nb in notebooks for c in nb["cells"] if c["cell_type"] == "code"]
    return cells + re.findall(r"```.*?```|`[^`\n]+`", (repo / "README.md").read_text(), re.S)


def unused_functions(package: Path, shown: list[str] = ()) -> list[str]:
    """Functions and methods of the package that nothing calls or names: not the package (outside their own body), not
    an ``__all__``, not the code ``shown`` to users (``user_code``: a method documented there is API). A function of a
    module counts as used by its bare name in its own module, or through an import of the package (``from .x import
    f``, ``x.f``, an ``__all__`` entry, ``getattr(x, "f")``); the same name elsewhere (a local variable, another
    object's attribute, a string, a docstring) is another thing. A method counts as used by any attribute of its name
    (the object's class is not known statically). Called by Python or a framework, so allowed by kind: dunder methods,
    IPython's display hooks (``DISPLAY_HOOK``), members of a ``Protocol``, methods that override an outside base
    class's attribute (or whose base is known only at run time), methods registered by a framework's decorator
    (``FRAMEWORK_DECORATORS``), the sub-command interface (``SUBCOMMAND``), and old spellings kept for one release (a
    function that calls ``lazy.warn_deprecated``). Tests and benchmarks are no use."""
    trees = _trees(package)
    hierarchy = _Hierarchy(package, trees)
    readers = []
    for module, (_, tree) in trees.items():
        reader = _Reader(module, hierarchy.names[module], trees, tree)
        reader.visit(tree)
        readers.append(reader)
    uses: dict[str, list[tuple[frozenset[int], str, str]]] = {}
    for name in re.findall(r"[A-Za-z_]\w*", "\n".join(shown)):
        uses.setdefault(name, []).append((frozenset(), PACKAGE_USE, ""))
    for reader in readers:
        for name, places in reader.uses.items():
            uses.setdefault(name, []).extend((functions, kind, reader.module) for functions, kind in places)
    unused = []
    for reader in readers:
        for module, node, owner in reader.definitions:
            name = node.name

            def counts(kind: str, where: str, owner: ast.ClassDef | None = owner, module: str = module) -> bool:
                return owner is not None or kind == PACKAGE_USE or (kind == LOCAL_USE and where == module)

            if any(id(node) not in functions and counts(kind, where) for functions, kind, where in uses.get(name, ())):
                continue
            if (name.startswith("__") and name.endswith("__")) or DISPLAY_HOOK.match(name):
                continue
            if id(node) in reader.deprecated or _registered(hierarchy, module, node):
                continue
            path, tree = trees[module]
            if owner is None and name in SUBCOMMAND and path.parent.name == "commands" and _is_subcommand(tree):
                continue
            if owner is not None:
                bases = hierarchy.outside_bases(module, owner)
                if any(base is None or base is typing.Protocol or hasattr(base, name) for base in bases):
                    continue
            path = path.relative_to(package)
            where = f"{owner.name}.{name}" if owner is not None else name
            unused.append(f"{path}:{node.lineno} {where}")
    return sorted(unused)


def _registered(hierarchy: _Hierarchy, module: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a decorator of a framework (``FRAMEWORK_DECORATORS``) registers ``node``."""
    for decorator in node.decorator_list:
        expr = decorator.func if isinstance(decorator, ast.Call) else decorator
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        target = hierarchy.names[module].aliases.get(getattr(expr, "id", ""), ("", None))[0]
        if target.split(".")[0] in FRAMEWORK_DECORATORS:
            return True
    return False


# ---------------------------------------------------------------------------------------------------- the rules kept
MAX_TOP_LEVEL_NAMES = 25


def _copy_package(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "src" / "fastdist_lab", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "src" / "fastdist_lab"


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + textwrap.dedent(code))


def _unused(package: Path) -> list[str]:
    return unused_functions(package, user_code(REPO))


def test_no_import_cycle():
    assert import_cycles(PACKAGE) == []


@pytest.mark.parametrize("inside_a_function", [False, True])
def test_an_import_cycle_breaks_the_rule(tmp_path, inside_a_function):
    # One layer, so import-linter's layers see nothing: formatting and validation importing each other.
    copy = _copy_package(tmp_path)
    _append(copy / "formatting.py", "\nfrom .validation import check_int\n")
    back = (
        "\n\ndef _late():\n    from .formatting import plural\n"
        if inside_a_function
        else "\nfrom .formatting import plural\n"
    )
    _append(copy / "validation.py", back)
    assert import_cycles(copy) == [["fastdist_lab.formatting", "fastdist_lab.validation"]]


def test_no_two_modules_share_a_file_name():
    assert repeated_module_names(PACKAGE) == {}


@pytest.mark.parametrize(
    ("added", "stem"),
    [
        (("cost/seeds.py",), "seed"),  # a name already used in another folder
        (("viz/widgets.py",), "widget"),  # a module named like a subpackage
        (("streams/draw.py",), "draw"),  # x.py beside xs.py
        (("checks/verify.py", "checks/verification.py"), "verify"),  # a verb beside its noun
        (("commands/seeds.py",), "seed"),  # commands/ but not a sub-command (no add_arguments and run)
    ],
)
def test_a_repeated_module_name_breaks_the_rule(tmp_path, added, stem):
    copy = _copy_package(tmp_path)
    for name in added:
        (copy / name).write_text('"""A module."""\n')
    assert stem in repeated_module_names(copy)


def test_the_top_level_is_small_and_dir_shows_exactly_all():
    code = "import json, fastdist_lab as f; print(json.dumps([dir(f), sorted(f.__all__)]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    names, public = json.loads(out.stdout)
    assert names == public and len(public) <= MAX_TOP_LEVEL_NAMES
    assert all(getattr(fastdist_lab, name) is not None for name in public)


def test_a_name_in_dir_outside_all_breaks_the_rule(tmp_path):
    copy = _copy_package(tmp_path)
    init = copy / "__init__.py"
    init.write_text(
        init.read_text().replace("__getattr__, __dir__ = lazy_attributes(", "__getattr__, _ = lazy_attributes(")
    )
    code = "import json, fastdist_lab as f; print(json.dumps([f.__file__, dir(f), sorted(f.__all__)]))"
    env = dict(os.environ, PYTHONPATH=str(copy.parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    where, names, public = json.loads(out.stdout)
    assert Path(where).parent == copy
    assert sorted(set(names) - set(public)) and {"annotations", "sys", "lazy_attributes"} <= set(names)


OLD_NAMES = sorted((name, module) for module, names in fastdist_lab._MOVED.items() for name in names)


@pytest.mark.parametrize(("name", "module"), OLD_NAMES)
def test_an_old_top_level_name_warns_with_its_new_spelling(name, module):
    with pytest.warns(
        DeprecationWarning, match=rf"fastdist_lab\.{name} is deprecated: use fastdist_lab\{module}\.{name}"
    ):
        value = getattr(fastdist_lab, name)
    assert value is getattr(importlib.import_module("fastdist_lab" + module), name)
    assert name not in dir(fastdist_lab)


def test_no_notebook_and_no_readme_example_uses_an_old_name():
    old = "|".join(name for name, _ in OLD_NAMES)
    pattern = re.compile(rf"\b(fdl|fastdist_lab)\.({old})\b|from fastdist_lab import [^\n]*\b({old})\b")
    assert [m.group(0) for text in user_code(REPO) for m in pattern.finditer(text)] == []


def test_every_function_of_the_package_is_used():
    assert _unused(PACKAGE) == []


def test_an_unused_function_breaks_the_rule(tmp_path):
    copy = _copy_package(tmp_path)
    _append(
        copy / "formatting.py",
        """

        def forgotten(text: str) -> str:
            \"\"\"Nobody calls this.\"\"\"
            return forgotten(text[1:]) if text else text  # calling itself is no use
        """,
    )
    layout = copy / "layout.py"
    layout.write_text(layout.read_text().replace(
        "    def plot_dims(self",
        "    def never_called(self) -> int:\n        \"\"\"Nor this.\"\"\"\n        return 0\n\n    def plot_dims(self",
    ))  # fmt: skip
    assert [re.sub(r":\d+", "", f) for f in _unused(copy)] == [
        "formatting.py forgotten",
        "layout.py Layout.never_called",
    ]


def test_methods_called_by_python_ipython_or_a_framework_are_not_reported(tmp_path):
    copy = _copy_package(tmp_path)
    _append(
        copy / "formatting.py",
        """

        import json
        from typing import Protocol

        import traitlets


        class _Encoder(json.JSONEncoder):
            def default(self, o):  # json calls it
                return str(o)

            def __len__(self) -> int:  # Python calls it
                return 0

            def _repr_html_(self) -> str:  # IPython calls it
                return ""


        class _Sized(Protocol):
            def size(self) -> int:
                \"\"\"A member of a protocol: implemented elsewhere.\"\"\"


        class _Watched(traitlets.HasTraits):
            value = traitlets.Int()

            @traitlets.validate("value")
            def _check_value(self, proposal):  # traitlets calls it
                return proposal.value


        def _encoded(value) -> str:
            return json.dumps(value, cls=_Encoder) + repr(_Watched) + repr(_Sized)


        __all__ = ["_encoded"]
        """,
    )
    assert _unused(copy) == []


def _forgotten(name: str) -> str:
    return f'\n\ndef {name}(text: str) -> str:\n    """Nobody calls this."""\n    return text\n'


NAMED_ELSEWHERE = {
    "in_a_message": 'def _message() -> str:\n    return "in_a_message"\n',
    "in_a_table": 'TABLE = {"in_a_table": 1}\n',
    "in_a_docstring": 'def _documented() -> None:\n    """Calls in_a_docstring() (it does not)."""\n',
    "as_an_attribute": "def _attribute(args) -> object:\n    return args.as_an_attribute\n",
    "as_a_local": "def _local() -> int:\n    as_a_local = 1\n    return as_a_local\n",
    "in_an_f_string": 'def _f_string(x) -> str:\n    return f"{x}in_an_f_string"\n',
}
"""Functions of ``formatting`` that nobody uses, each named elsewhere (in ``validation``) as something else."""

USED_THROUGH_THE_PACKAGE = {
    "imported_as": "from .formatting import imported_as as spelled\n\n_A = spelled\n",
    "module_attribute": "from . import formatting\n\n_B = formatting.module_attribute\n",
    "dotted_attribute": "import fastdist_lab.formatting\n\n_C = fastdist_lab.formatting.dotted_attribute\n",
    "by_getattr": "_D = getattr(formatting, 'by_getattr')\n",
    "in_all": "__all__ = ['in_all']\n",
}
"""Functions of ``formatting`` used from ``painters`` through an import of the package, one way each."""


def test_an_unused_function_named_elsewhere_still_breaks_the_rule(tmp_path):
    copy = _copy_package(tmp_path)
    _append(copy / "formatting.py", "".join(_forgotten(name) for name in NAMED_ELSEWHERE))
    _append(
        copy / "validation.py",
        "".join(f"\n\n{code}" for code in NAMED_ELSEWHERE.values())
        + "\n_USED = _message, _documented, _attribute, _local, _f_string\n",
    )
    reported = {re.sub(r":\d+", "", f) for f in _unused(copy)}
    assert reported == {f"formatting.py {name}" for name in NAMED_ELSEWHERE}


def test_a_function_used_through_an_import_of_the_package_is_used(tmp_path):
    copy = _copy_package(tmp_path)
    _append(copy / "formatting.py", "".join(_forgotten(name) for name in USED_THROUGH_THE_PACKAGE))
    _append(copy / "painters.py", "".join(f"\n{code}" for code in USED_THROUGH_THE_PACKAGE.values()))
    assert _unused(copy) == []


def test_an_old_spelling_kept_for_one_release_is_not_reported(tmp_path):
    copy = _copy_package(tmp_path)
    _append(
        copy / "formatting.py",
        """

        def old_spelling(text: str) -> str:
            \"\"\"Deprecated: ``plural``.\"\"\"
            from .lazy import warn_deprecated

            warn_deprecated("fastdist_lab.formatting.old_spelling", "fastdist_lab.formatting.plural")
            return text
        """,
    )
    assert _unused(copy) == []


def test_no_import_reaches_up_a_layer_by_name():
    assert layer_violations(PACKAGE, REPO / "pyproject.toml") == []


@pytest.mark.parametrize(
    ("module", "code", "edge"),
    [
        (  # import_module of an absolute name, inside a function
            "layout.py",
            "\n\ndef _late():\n    import importlib\n\n    return importlib.import_module('fastdist_lab.viz')\n",
            "fastdist_lab.layout -> fastdist_lab.viz",
        ),
        (  # import_module of a relative name
            "runtime/results.py",
            "\n\ndef _late():\n    from importlib import import_module\n\n"
            "    return import_module('..checks', __package__)\n",
            "fastdist_lab.runtime.results -> fastdist_lab.checks",
        ),
        (  # a lazy table of a package (lazy.lazy_attributes) serving a name from a higher layer
            "streams/__init__.py",
            "\n_LATER: dict[str, str] = {'plot_streams': '..viz'}\n",
            "fastdist_lab.streams -> fastdist_lab.viz",
        ),
        (  # independent siblings, by name
            "conventions/megatron.py",
            "\n\ndef _late():\n    import importlib\n\n"
            "    return importlib.import_module('fastdist_lab.streams.predict')\n",
            "fastdist_lab.conventions.megatron -> fastdist_lab.streams.predict",
        ),
        (  # an ordinary upward import: the same rule as import-linter's
            "streams/stream_report.py",
            "\n\ndef _late():\n    from ..runtime import LocalCluster\n\n    return LocalCluster\n",
            "fastdist_lab.streams.stream_report -> fastdist_lab.runtime",
        ),
    ],
)
def test_an_upward_import_by_name_breaks_the_layers(tmp_path, module, code, edge):
    copy = _copy_package(tmp_path)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    _append(copy / module, code)
    assert layer_violations(copy, tmp_path / "pyproject.toml") == [edge]


def test_an_import_cycle_through_a_packages_lazy_names_breaks_the_rule(tmp_path, monkeypatch):
    # The root serves LocalCluster from .runtime on first use, the runtime serves its names from its modules: a module
    # of the runtime importing the root closes a cycle that no import statement shows.
    copy = _copy_package(tmp_path)
    # (modes.py: no import statement of the package reaches it, so only the lazy names close the cycle)
    _append(copy / "runtime" / "modes.py", "\nfrom .. import Layout\n")
    cycles = import_cycles(copy)
    assert len(cycles) == 1 and {"fastdist_lab", "fastdist_lab.runtime.modes"} <= set(cycles[0])
    monkeypatch.setattr(sys.modules[__name__], "_lazy_edges", lambda *args: set())
    assert import_cycles(copy) == []  # what the statements alone show: the miss this rule closes


# ---------------------------------------------------------------------------------------------------- docs and dir()
PATH_TOKEN = re.compile(r"`([\w./-]+(?:/|\.(?:py|ipynb|md|json|toml|sh|cfg|yml|yaml)))`")
"""A file or folder named in a document's code span: ``cost/``, ``streams/invariants.py``, ``validation.py``."""

OUTSIDE_PATHS = ("fast_llm/", "megatron/", "torchtitan/", "pretrain_gpt.py", "run_train.sh")
"""Paths of other projects the documents name (Fast-LLM's sources, Megatron-LM's and torchtitan's launch scripts)."""


def missing_paths(repo: Path, document: str) -> list[str]:
    """The paths ``document`` (a Markdown file of ``repo``) names that do not exist. A path with a folder is read from
    the repository's root or the package's; a bare file name from the last folder its paragraph named (``cost/``, then
    ``schedules.py`` is ``cost/schedules.py``), or anywhere in the repository when the paragraph named none."""
    package = repo / "src" / "fastdist_lab"
    everywhere = {path.name for path in repo.rglob("*") if not {".git", ".venv", "node_modules"} & set(path.parts)}
    missing = []
    for paragraph in re.split(r"\n\s*\n", (repo / document).read_text()):
        folder = None
        for token in PATH_TOKEN.findall(paragraph):
            name = token.rstrip("/")
            if token.startswith(OUTSIDE_PATHS):
                continue
            if "/" in token:
                found = any((base / name).exists() for base in (repo, package, repo / "src"))
                if token.endswith("/"):
                    folder = next((base / name for base in (package, repo) if (base / name).is_dir()), None)
            else:
                found = (folder / name).exists() if folder is not None else name in everywhere
            if not found:
                where = f" (in {folder.relative_to(repo)}/)" if folder is not None and "/" not in token else ""
                missing.append(f"{document}: {token}{where}")
    return missing


@pytest.mark.parametrize("document", ["ARCHITECTURE.md", "README.md"])
def test_every_path_the_documents_name_exists(document):
    assert missing_paths(REPO, document) == []


def test_a_path_that_does_not_exist_breaks_the_rule(tmp_path):
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "DOC.md").write_text(
        "`cost/formulas/` holds `schedules.py` and `validation.py`; `viz/colors.py`, `viz/palette.py`, `scripts/`.\n\n"
        "Core: `validation.py`.\n"
    )
    assert missing_paths(tmp_path, "DOC.md") == [
        "DOC.md: validation.py (in src/fastdist_lab/cost/formulas/)",  # there is one in the core, not in cost/
        "DOC.md: viz/palette.py",
        "DOC.md: scripts/",
    ]


PUBLIC_NAMESPACES_CODE = """
import importlib, json, fastdist_lab
out = {}
for name in ["fastdist_lab", *("fastdist_lab." + s for s in fastdist_lab._SUBPACKAGES)]:
    module = importlib.import_module(name)
    public = lambda names: sorted(n for n in names if not (n.startswith("__") and n.endswith("__")))
    out[name] = [public(dir(module)), public(getattr(module, "__all__", ()))]
print(json.dumps(out))
"""


def _namespace_leaks(source_root: Path) -> dict[str, list[str]]:
    """For the root and each subpackage it serves: the names ``dir()`` shows outside ``__all__`` (or the reverse),
    read in a fresh interpreter from the package under ``source_root``."""
    env = dict(os.environ, PYTHONPATH=str(source_root))
    out = subprocess.run(
        [sys.executable, "-c", PUBLIC_NAMESPACES_CODE], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    return {name: sorted(set(seen) ^ set(public)) for name, (seen, public) in json.loads(out.stdout).items()}


def test_every_public_namespace_dir_is_its_all():
    leaks = _namespace_leaks(REPO / "src")
    assert "fastdist_lab.errors" in leaks and "fastdist_lab.cost" in leaks
    assert {name: names for name, names in leaks.items() if names} == {}


def test_a_name_leaking_into_a_subpackages_dir_breaks_the_rule(tmp_path):
    copy = _copy_package(tmp_path)
    errors = copy / "errors.py"
    errors.write_text(errors.read_text().replace('"""\n\n', '"""\n\nfrom typing import Any\n\n', 1))
    cost = copy / "cost" / "__init__.py"
    cost.write_text(cost.read_text().replace("__getattr__, __dir__ = lazy_attributes(", "_ = lazy_attributes("))
    leaks = _namespace_leaks(copy.parent)
    assert leaks["fastdist_lab.errors"] == ["Any"]
    assert {"annotations", "training", "schedules", "lazy_attributes"} <= set(leaks["fastdist_lab.cost"])
