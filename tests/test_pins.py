"""One set of pins: the torch of the README's commands, of CI (``.ci/run``) and of ``environment.yml`` is the same
exact version, within ``pyproject.toml``'s floor; ``environment.yml`` is read as conda would read it (its pip
section resolved with pip's own requirement parser), so no conda is needed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins(text: str) -> set[str]:
    return set(re.findall(r"torch==([0-9][0-9A-Za-z.+]*)", text))


def _environment_requirements() -> list[str]:
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = [entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict) and "pip" in entry]
    assert len(pip) == 1, "environment.yml has one pip section"
    return pip[0]


def test_readme_ci_and_environment_pin_the_same_torch():
    readme, ci = _pins((ROOT / "README.md").read_text()), _pins((ROOT / ".ci" / "run").read_text())
    named = [Requirement(entry) for entry in _environment_requirements() if not entry.startswith("-")]
    environment = {next(iter(r.specifier)).version for r in named if r.name == "torch"}
    assert len(readme) == 1, f"README pins torch as {readme}"
    assert readme == ci == environment, f"README {readme}, .ci/run {ci}, environment.yml {environment}"
    floor = next(Requirement(d) for d in _pyproject()["project"]["dependencies"] if d.startswith("torch"))
    assert Version(next(iter(readme))) in SpecifierSet(str(floor.specifier)), f"pin outside pyproject's {floor}"


def test_environment_yml_resolves_without_conda():
    requirements = _environment_requirements()
    editable = [entry for entry in requirements if entry.startswith("-e")]
    assert editable == ['-e ".[lab,test]"'], editable  # the project itself, with the README's extras
    extras = set(re.search(r"\[(.*)\]", editable[0]).group(1).split(","))
    assert extras <= set(_pyproject()["project"]["optional-dependencies"]), extras
    for entry in requirements:
        if not entry.startswith("-"):
            requirement = Requirement(entry)  # raises on anything pip could not read
            assert requirement.specifier, f"{entry} is not pinned"
