"""The package's public names, as a user's code sees them, written to ``tests/api/public_names.json``.

One entry per public namespace (the root and each subpackage it serves: its ``dir()``) and one per class those
namespaces export (the public attributes its own classes define, dataclass fields included; what it inherits from
outside the package is left out, so the list does not change with Python or torch). ``tests/api/test_public_names.py``
holds the package to the committed list, so that removing or renaming a public name is a deliberate, visible change
(made with a deprecated alias for one release). After such a change, regenerate the list from the repository root::

    python scripts/public_names.py

(``--check`` prints the difference and exits 1 instead of writing.)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path

ROOT = "fastdist_lab"
LIST = Path(__file__).resolve().parents[1] / "tests" / "api" / "public_names.json"


def namespaces() -> list[str]:
    """The root and every subpackage it serves as an attribute (``fastdist_lab.errors``, ``.cost``, ...)."""
    root = importlib.import_module(ROOT)
    return [ROOT, *(f"{ROOT}.{name}" for name in sorted(root._SUBPACKAGES))]  # noqa: SLF001 (the root keeps the list)


def class_attributes(cls: type) -> list[str]:
    """The public attributes the package's own classes in ``cls``'s MRO define (fields of a dataclass included)."""
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == ROOT:
            names |= {name for name in vars(klass) if not name.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {field.name for field in dataclasses.fields(cls) if not field.name.startswith("_")}
    return sorted(names)


def public_names() -> dict[str, dict[str, list[str]]]:
    """``{"namespaces": namespace -> its dir() (dunders left out), "classes": "namespace.Class" -> class_attributes}``
    for every class of the package a namespace exports (under the first namespace that exports it, the root first)."""
    spaces: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    seen: set[type] = set()
    for namespace in namespaces():
        module = importlib.import_module(namespace)
        names = [name for name in dir(module) if not (name.startswith("__") and name.endswith("__"))]
        spaces[namespace] = names
        for name in names:
            value = getattr(module, name)
            if isinstance(value, type) and value.__module__.split(".")[0] == ROOT and value not in seen:
                seen.add(value)
                classes[f"{namespace}.{name}"] = class_attributes(value)
    return {"namespaces": spaces, "classes": classes}


def difference(kept: dict[str, dict[str, list[str]]], now: dict[str, dict[str, list[str]]]) -> list[str]:
    """What changed from ``kept`` to ``now`` (two ``public_names()``), one line per namespace or class that changed:
    ``-name`` gone, ``+name`` new."""
    kept = {key: names for part in kept.values() for key, names in part.items()}
    now = {key: names for part in now.values() for key, names in part.items()}
    lines = []
    for key in sorted(set(kept) | set(now)):
        gone = sorted(set(kept.get(key, ())) - set(now.get(key, ())))
        new = sorted(set(now.get(key, ())) - set(kept.get(key, ())))
        if key not in now:
            lines.append(f"{key}: gone")
        elif key not in kept:
            lines.append(f"{key}: new")
        elif gone or new:
            lines.append(f"{key}: " + " ".join([*(f"-{n}" for n in gone), *(f"+{n}" for n in new)]))
    return lines


def main(argv: list[str]) -> int:
    """Write the list (``--check``: compare with it, exit 1 and print the changes when they differ)."""
    now = public_names()
    if "--check" in argv:
        changes = difference(json.loads(LIST.read_text()), now)
        print("\n".join(changes) or "the public names are the committed list")
        return 1 if changes else 0
    LIST.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(now['namespaces'])} namespaces and {len(now['classes'])} classes to {LIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
