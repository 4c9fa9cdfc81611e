"""The cost model's outputs held to their committed fingerprints (issue 44: moving code changes no prediction, search
row, band, report text, command output or panel value). ``scripts/fingerprints.py`` computes them; its cases and
hashes are ``tests/cost/fingerprints.json`` (``python scripts/fingerprints.py --write`` after a deliberate change of
outputs, in the same commit). The suite compares a share of the cases (every fourth estimate, every second search:
``STRIDE``) and leaves the validation's to ``test_trust`` (the committed trust table is what ``validate`` gives now);
``python scripts/fingerprints.py`` compares every case of every group, about a minute."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fingerprints.py"


def _script():
    spec = importlib.util.spec_from_file_location("fingerprints_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fingerprints = _script()


STRIDE = {"quick": 4, "search": 2, "panel": 1}
"""The suite compares every N-th case of a group (the script, every case)."""


def _held(groups, stride: int) -> int:
    changed, outputs = fingerprints.check(groups, stride=stride)
    assert changed == [], f"{len(changed)} case(s) changed their output:\n" + "\n".join(changed[:20])
    print(f"{outputs} outputs compared with their fingerprints ({', '.join(groups)})")
    return outputs


def test_estimates_bands_commands_and_comparisons_keep_their_fingerprints():
    assert _held(fingerprints.QUICK_GROUPS, STRIDE["quick"]) >= 500


def test_searches_keep_their_fingerprints():  # slow (tests/conftest.py): whole searches
    assert _held(["search"], STRIDE["search"]) >= 500


def test_panels_keep_their_fingerprints():  # slow: ipywidgets
    pytest.importorskip("ipywidgets")
    assert _held(["panel"], STRIDE["panel"]) >= 8


def test_a_changed_output_is_reported(tmp_path, monkeypatch):
    stored = json.loads(fingerprints.FILE.read_text())
    broken = {"estimate": stored["estimate"][:3], "band": stored["band"][:2]}
    broken["estimate"][1] = {**broken["estimate"][1], "hash": "0" * 20}  # as if the output had changed
    spec = dict(broken["band"][0]["spec"], gpus=broken["band"][0]["spec"]["gpus"] * 64)  # another question
    broken["band"][0] = {**broken["band"][0], "spec": spec}
    path = tmp_path / "fingerprints.json"
    path.write_text(json.dumps(broken))
    monkeypatch.setattr(fingerprints, "FILE", path)
    changed, outputs = fingerprints.check(["estimate", "band"])
    assert outputs == 5
    assert [line.split(":")[0] for line in changed] == ["estimate #1", "band #0"]


def test_every_group_has_cases_and_every_case_a_hash():
    stored = json.loads(fingerprints.FILE.read_text())
    assert set(stored) == set(fingerprints.GROUPS)
    assert all(stored[group] for group in fingerprints.GROUPS)
    assert all(len(case["hash"]) == 20 for group in stored.values() for case in group)
