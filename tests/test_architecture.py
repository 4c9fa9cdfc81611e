"""The house rules, checked by kept tools: layers (import-linter reads every import, function-level and
TYPE_CHECKING ones included), no import cycle, file names that say what a module holds, file sizes, a small top level
whose ``dir()`` is its ``__all__``, no function that nothing calls, and a light ``import fastdist_lab``. Each rule has
a test that breaks a copy of the package and sees the rule report it."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import typing
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
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("layout.py", "from .viz import plot_layout"),  # core -> viz
        ("streams/stream_report.py", "from ..runtime import LocalCluster"),  # streams -> runtime
        ("conventions/megatron.py", "from ..streams import predict"),  # independent siblings
        ("runtime/results.py", "from ..checks import check_layout"),  # runtime -> checks
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
    assert "BROKEN" in result.stdout and "0 kept, 1 broken" in result.stdout


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


def _trees(package: Path) -> dict[str, tuple[Path, ast.Module]]:
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


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at its top or inside a function (a name imported from a package is
    an edge to the package, or to its submodule when it names one)."""
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
        graph[name].discard(name)
    return graph


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


def _is_subcommand(tree: ast.Module) -> bool:
    """A module of ``commands/`` named after its sub-command: it defines ``add_arguments`` and ``run``."""
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return {"add_arguments", "run"} <= defined


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


class _Reader(ast.NodeVisitor):
    """Collects every function definition and every use of a name (a name read, an attribute read, an identifier in a
    string such as an ``__all__`` entry or a ``getattr`` argument), with the functions each use sits in."""

    def __init__(self, module: str):
        self.module = module
        self.owners: list[ast.AST] = []
        self.definitions: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]] = []
        self.uses: dict[str, list[frozenset[int]]] = {}

    def _use(self, name: str) -> None:
        functions = frozenset(id(o) for o in self.owners if not isinstance(o, ast.ClassDef))
        self.uses.setdefault(name, []).append(functions)

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
            self._use(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self._use(node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value.isidentifier():
            self._use(node.value)


def user_code(repo: Path) -> list[str]:
    """The code a user is shown: the notebooks' code cells and the README's code (spans and blocks)."""
    notebooks = [json.loads(path.read_text()) for path in sorted((repo / "notebooks").glob("*.ipynb"))]
    cells = ["".join(c["source"]) for nb in notebooks for c in nb["cells"] if c["cell_type"] == "code"]
    return cells + re.findall(r"```.*?```|`[^`\n]+`", (repo / "README.md").read_text(), re.S)


def unused_functions(package: Path, shown: list[str] = ()) -> list[str]:
    """Functions and methods of the package that nothing calls or names: not the package (outside their own body), not
    an ``__all__``, not the code ``shown`` to users (``user_code``: a method documented there is API). Called by Python
    or a framework, so allowed by kind: dunder methods, IPython's display hooks (``DISPLAY_HOOK``), members of a
    ``Protocol``, methods that override an outside base class's attribute (or whose base is known only at run time),
    methods registered by a framework's decorator (``FRAMEWORK_DECORATORS``). Tests and benchmarks are no use."""
    trees = _trees(package)
    hierarchy = _Hierarchy(package, trees)
    readers = []
    for module, (_, tree) in trees.items():
        reader = _Reader(module)
        reader.visit(tree)
        readers.append(reader)
    uses: dict[str, list[frozenset[int]]] = {}
    for name in re.findall(r"[A-Za-z_]\w*", "\n".join(shown)):
        uses.setdefault(name, []).append(frozenset())
    for reader in readers:
        for name, places in reader.uses.items():
            uses.setdefault(name, []).extend(places)
    unused = []
    for reader in readers:
        for module, node, owner in reader.definitions:
            name = node.name
            if any(id(node) not in functions for functions in uses.get(name, ())):
                continue
            if (name.startswith("__") and name.endswith("__")) or DISPLAY_HOOK.match(name):
                continue
            if _registered(hierarchy, module, node):
                continue
            if owner is not None:
                bases = hierarchy.outside_bases(module, owner)
                if any(base is None or base is typing.Protocol or hasattr(base, name) for base in bases):
                    continue
            path = trees[module][0].relative_to(package)
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
