"""Fixtures of the runtime tests: a private temporary directory for everything they start, one shared 8-rank
gloo cluster (real processes, real groups over loopback), and real SIGINTs aimed at the code under test only."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

import fastdist_lab
from fastdist_lab import Layout

WORLD = 8


def _layout_of(**kwargs: object) -> Layout:
    fields = {"world_size": WORLD, "local_world_size": WORLD, **kwargs}
    return Layout(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every runtime test (and every process it starts) uses a temporary directory no other program uses.

    Clusters of other programs on this machine then cannot disturb the checks that look for leftovers.
    """
    path = tmp_path_factory.mktemp("rt")
    saved_env, saved_cache = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved_cache
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


@pytest.fixture(scope="session")
def layout_of() -> Callable[..., Layout]:
    """Builds a one-node layout of the shared cluster's 8 ranks with the given parallel factors."""
    return _layout_of


DEFAULT_FACTORS = dict(tensor_parallel=2, pipeline_parallel=2, sequence_data_parallel=2)
"""The shared cluster's layout."""


@pytest.fixture(scope="session")
def shared_cluster(private_tmpdir: Path):
    """The 8-rank gloo cluster the session shares, with the default layout (tp 2, pp 2, sdp 2) applied."""
    from fastdist_lab import LocalCluster

    with LocalCluster(WORLD, backend="gloo", local_world_size=WORLD, timeout=60, progress=False) as shared:
        verification = shared.apply(_layout_of(**DEFAULT_FACTORS))
        assert verification.ok, verification
        yield shared


@pytest.fixture
def cluster(shared_cluster):
    """The shared cluster, running with a layout: a test that failed and left it stopped or without a layout is
    not passed on to the next one (the next test would fail on that state, not on its own: issue 30)."""
    if not shared_cluster.running or shared_cluster.layout is None:
        verification = shared_cluster.apply(_layout_of(**DEFAULT_FACTORS))  # restarts the ranks when stopped
        assert verification.ok, verification
    return shared_cluster


# ----------------------------------------------------------------------------------------------- interrupts
PACKAGE_DIR = os.path.dirname(os.path.abspath(fastdist_lab.__file__)) + os.sep
"""The folder of the imported package object: the code under test, wherever the clone or its venv lives."""


def in_code_under_test(frame: FrameType | None) -> bool:
    """Whether ``frame`` or one of its callers runs code of the imported ``fastdist_lab`` package.

    Aimed by the package object's own folder, never by a path substring: in a clone in a folder named
    ``fastdist_lab``, the tests, the virtual environment and pytest itself sit under ``.../fastdist_lab/`` too.
    """
    while frame is not None:
        if os.path.abspath(frame.f_code.co_filename).startswith(PACKAGE_DIR):
            return True
        frame = frame.f_back
    return False


class Interrupts:
    """Real SIGINTs to this process that raise ``KeyboardInterrupt`` only inside the code under test.

    While the ``interrupts`` fixture is active, a SIGINT that arrives while the main thread runs no fastdist_lab
    code is dropped (counted in ``dropped``), so nothing reaches pytest; ``after`` and ``barrage`` send them, and
    the fixture stops and joins every sender before it gives SIGINT back to pytest.
    """

    def __init__(self) -> None:
        self.raised = 0
        self.dropped = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    aims_at = staticmethod(in_code_under_test)

    def handler(self, signum: int, frame: FrameType | None) -> None:
        """The SIGINT handler: ``KeyboardInterrupt`` inside the package, nothing elsewhere."""
        if self.aims_at(frame):
            self.raised += 1
            raise KeyboardInterrupt
        self.dropped += 1

    def after(self, delay: float) -> threading.Timer:
        """One SIGINT to this process ``delay`` seconds from now (cancelled if the test ends first)."""
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        timer.daemon = True
        self._threads.append(timer)
        timer.start()
        return timer

    @contextlib.contextmanager
    def barrage(self, seconds: float, every: float) -> Iterator[threading.Event]:
        """SIGINTs every ``every`` seconds for ``seconds``; the event is set once they stopped."""
        over = threading.Event()

        def fire() -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end and not self._stop.is_set():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(every)
            over.set()

        thread = threading.Thread(target=fire, daemon=True)
        self._threads.append(thread)
        thread.start()
        try:
            yield over
        finally:
            self._stop.set()
            thread.join()
            self._stop.clear()

    def stop(self) -> None:
        """Stop every sender and wait for it (a timer not fired yet never fires)."""
        self._stop.set()
        for thread in self._threads:
            if isinstance(thread, threading.Timer):
                thread.cancel()
            thread.join()


@pytest.fixture
def interrupts() -> Iterator[Interrupts]:
    """SIGINTs aimed at the code under test (see ``Interrupts``); pytest's own handler is back after the test."""
    aimed = Interrupts()
    previous = signal.signal(signal.SIGINT, aimed.handler)
    try:
        yield aimed
    finally:
        aimed.stop()
        time.sleep(0.05)  # a SIGINT sent just before the senders stopped is handled here, by the aimed handler
        signal.signal(signal.SIGINT, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``KeyboardInterrupt`` that leaves a test using ``interrupts`` fails that test: it never stops the session."""
    if "interrupts" not in getattr(item, "fixturenames", ()):
        return (yield)
    try:
        return (yield)
    except KeyboardInterrupt:
        pytest.fail("a SIGINT sent by the test escaped the code under test", pytrace=False)
