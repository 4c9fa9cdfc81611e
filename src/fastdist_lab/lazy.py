"""Names a package serves on first use, written once for every package whose parts import heavy libraries.

``lazy_attributes`` gives a package its module ``__getattr__`` and ``__dir__`` (PEP 562): a public name is imported
from its module when first read (then kept), a subpackage is imported when first read, an old name still works with a
``DeprecationWarning`` naming the new spelling, and ``dir()`` lists exactly the public names. ``warn_deprecated`` is
the one wording of a deprecation, also for an old method or class attribute.

A module that moved (``fastdist_lab.cost.model`` to ``fastdist_lab.setup.transformer``) keeps its old path for a
release: ``moved_modules`` puts a module at the old path whose names are the new module's, each read with the same
warning.

A name that moved *up* a layer (``streams.draw`` to ``checks.draw_streams``) cannot be imported from its old place:
a lower layer never imports a higher one. The package root registers a loader for each new spelling in
``SUCCESSORS`` (as it registers painters), and the old spelling serves ``successor(spelling)``.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable, Collection, Mapping
from typing import Any

SUCCESSORS: dict[str, Callable[[], Any]] = {}
"""The new spelling of each name that moved up a layer (``"fastdist_lab.checks.draw_streams"``) -> what loads it;
registered by the package's ``__init__``, read through ``successor``."""


def successor(spelling: str) -> Any:
    """What the new spelling ``spelling`` names, loaded through ``SUCCESSORS`` (``LookupError`` when unregistered)."""
    try:
        loader = SUCCESSORS[spelling]
    except KeyError:
        raise LookupError(f"{spelling} is not registered (import fastdist_lab registers it)") from None
    return loader()


def lazy_attributes(
    package: str,
    names: Mapping[str, str],
    public: Collection[str],
    *,
    submodules: Collection[str] = (),
    deprecated: Mapping[str, tuple[str | None, str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``.

    ``names`` maps each lazily served name to the module (relative to ``package``) that defines it;
    ``submodules`` are imported when read as attributes; ``deprecated`` maps an old name to (its module, the new
    spelling), or to (``None``, the new spelling) for a name that moved up a layer (served by ``successor``).
    ``__dir__`` returns ``public`` (the package's ``__all__``) and nothing else.
    """
    namespace = sys.modules[package].__dict__
    moved = dict(deprecated or {})

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], package), name)
            namespace[name] = value
            return value
        if name in submodules:
            return importlib.import_module(f".{name}", package)
        if name in moved:
            module, spelling = moved[name]
            warn_deprecated(f"{package}.{name}", spelling, stacklevel=3)
            return successor(spelling) if module is None else getattr(importlib.import_module(module, package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__


def warn_deprecated(old: str, spelling: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``spelling`` (the one wording of the package's deprecations: an
    old name works, with this ``DeprecationWarning``, for one release). ``stacklevel`` 3 points at the caller of the
    function that calls this."""
    warnings.warn(
        f"{old} is deprecated: use {spelling} (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def moved_modules(package: str, moves: Mapping[str, str]) -> None:
    """Keep the old module paths of ``package`` importable for a release: ``package.<old>`` is a module whose names are
    those of the module ``moves[old]`` names (an absolute dotted path), each read with a ``DeprecationWarning`` naming
    the new path (``from fastdist_lab.cost.model import Transformer`` still works)."""
    parent = sys.modules[package]
    for old, new in moves.items():
        name = f"{package}.{old}"
        module = types.ModuleType(name, f"Deprecated: the module {new} (moved; the old path goes in the next release).")
        module.__getattr__ = _moved_attribute(name, new)  # type: ignore[method-assign]
        sys.modules.setdefault(name, module)
        setattr(parent, old, sys.modules[name])


def _moved_attribute(old: str, new: str) -> Callable[[str], Any]:
    def __getattr__(attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(f"module {old!r} has no attribute {attribute!r}")
        warn_deprecated(f"{old}.{attribute}", f"{new}.{attribute}")
        return getattr(importlib.import_module(new), attribute)

    return __getattr__
