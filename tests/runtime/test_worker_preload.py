"""Modules the worker server imports once, before it forks the workers (``supervisor.preload_in_workers``)."""

from __future__ import annotations

import sys

import pytest

from fastdist_lab import LocalCluster
from fastdist_lab.runtime import supervisor

MODULE = "xml.dom.minidom"
"""A module no worker imports on its own."""


def imported_before_the_call(ctx, name):
    """Whether ``name`` was imported in this worker before anything of the call imported it."""
    return name in sys.modules


@pytest.fixture
def registry(monkeypatch):
    """A registry of its own for the test, the package's registrations left out."""
    monkeypatch.setattr(supervisor, "_worker_modules", [])
    return supervisor


def workers_have(name):
    with LocalCluster(2, backend="gloo", progress=False, timeout=60) as cluster:
        return cluster.run(imported_before_the_call, name).values


def test_a_registered_module_is_imported_in_every_worker_before_any_call(registry):
    assert workers_have(MODULE) == [False, False]  # the check can fail: nothing else imports it
    registry.preload_in_workers(MODULE, "no_such_module_anywhere", MODULE)  # a missing one does not stop the server
    assert registry._worker_modules == [MODULE, "no_such_module_anywhere"]
    assert workers_have(MODULE) == [True, True]


def test_the_training_check_registers_torchs_pipeline_schedules():
    import fastdist_lab.checks.train_step  # noqa: F401

    assert "torch.distributed.pipelining" in supervisor._worker_modules
