"""Fixtures of the browser end-to-end test: Debian's Chromium, a private JupyterLab, process accounting.

Everything the test starts is accounted for: the JupyterLab server runs in its own session (process group),
a background thread records every descendant of it (kernel, forkserver, workers) and every process whose
working directory lies in the temporary root, and the teardown shuts kernels down through the REST API,
terminates the server's process group and then asserts that none of those processes is left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("FASTDIST_LAB_E2E_CHROMIUM", "/usr/bin/chromium"))
INSTALL_SCRIPT = REPO / "scripts" / "install_browser.sh"
NOTEBOOK = REPO / "notebooks" / "00_quickstart.ipynb"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
SERVER_START_TIMEOUT = 180.0
_SCREENSHOT_DIRS: list[Path] = []


def in_ci() -> bool:
    """True when the environment says this is a CI run (``CI`` set to anything but empty/0/false/no)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str) -> None:
    """Skip the test with ``reason``; in CI (``CI=true``) fail instead, because there it must run."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set, so the browser test must run rather than skip)", pytrace=False)
    pytest.skip(reason)


# --------------------------------------------------------------------------------------------------- browser


@pytest.fixture(scope="session")
def chromium_executable() -> Path:
    """Path of Debian's Chromium; installed with scripts/install_browser.sh when missing (never downloaded).

    ``FASTDIST_LAB_E2E_CHROMIUM`` names another Chromium binary (then nothing is installed);
    ``FASTDIST_LAB_E2E_NO_INSTALL=1`` forbids the installation attempt.
    """
    default = str(CHROMIUM) == "/usr/bin/chromium"
    if not CHROMIUM.exists() and default and not os.environ.get("FASTDIST_LAB_E2E_NO_INSTALL"):
        try:
            done = subprocess.run(
                ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=900, check=False
            )
            detail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or [f"exit {done.returncode}"]
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = [str(exc)]
        if not CHROMIUM.exists():
            skip_or_fail(f"Chromium is not installed at {CHROMIUM} and could not be installed: {detail[0]}")
    if not CHROMIUM.exists():
        skip_or_fail(f"Chromium is not installed at {CHROMIUM} (run scripts/install_browser.sh)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"Playwright for Python is not installed: {exc}")
    return CHROMIUM


@pytest.fixture()
def screenshots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh folder for this run's screenshots and logs, printed at the end of the session.

    Under pytest's own temporary directory (nothing is left in the working tree) unless
    ``FASTDIST_LAB_E2E_SCREENSHOTS`` names a parent folder to keep them in.
    """
    kept = os.environ.get("FASTDIST_LAB_E2E_SCREENSHOTS")
    parent = Path(kept) if kept else tmp_path_factory.getbasetemp() / "e2e-screenshots"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    folder = parent / f"{stamp}-{request.node.name}"
    folder.mkdir(parents=True, exist_ok=True)
    _SCREENSHOT_DIRS.append(folder)
    print(f"\nscreenshots: {folder}")
    return folder


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print where this session's screenshots are, also without ``-s``."""
    for folder in _SCREENSHOT_DIRS:
        terminalreporter.write_line(f"e2e screenshots: {folder}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Keep each phase's report on the item so fixtures can tell whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# ------------------------------------------------------------------------------------------- process tracking


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} pgid {os.getpgid(proc.pid)}: {' '.join(proc.cmdline())[:200]}"
    except (psutil.Error, OSError):
        return f"pid {proc.pid}"


class ProcessTracker:
    """Records every process started on behalf of the test: the server's descendants and anything in ``root``.

    A daemon thread polls once a second, so short-lived workers are seen too; ``pgids`` collects every
    process group among them (the kernel runs in a session of its own).
    """

    def __init__(self, server: subprocess.Popen, root: Path) -> None:
        self.server_pid = server.pid
        self.root = str(root)
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        self.pgids: set[int] = {server.pid}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="e2e-process-tracker", daemon=True)
        self._server = psutil.Process(server.pid)
        self.scan()
        self._thread.start()

    def _add(self, proc: psutil.Process) -> None:
        try:
            key = (proc.pid, proc.create_time())
            pgid = os.getpgid(proc.pid)
        except (psutil.Error, OSError):
            return
        with self._lock:
            self.seen.setdefault(key, proc)
            if pgid != os.getpgrp():  # never the test runner's own group (nor the shell or CI job that runs it)
                self.pgids.add(pgid)

    def scan(self) -> None:
        """Record the server, its descendants, and every process whose working directory is inside ``root``."""
        try:
            family = [self._server, *self._server.children(recursive=True)]
        except psutil.Error:
            family = []
        for proc in family:
            self._add(proc)
        for proc in psutil.process_iter():
            try:
                cwd = proc.cwd()
            except (psutil.Error, OSError):
                continue
            if cwd == self.root or cwd.startswith(self.root + os.sep):
                self._add(proc)

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            self.scan()

    def stop(self) -> None:
        """Stop the polling thread (after one last scan)."""
        self.scan()
        self._stop.set()
        self._thread.join(timeout=10)

    def descendants(self, of_pid: int) -> list[psutil.Process]:
        """Live descendants of ``of_pid`` right now (e.g. the workers under the kernel)."""
        try:
            return [p for p in psutil.Process(of_pid).children(recursive=True) if _alive(p)]
        except psutil.Error:
            return []

    def survivors(self) -> list[psutil.Process]:
        """Processes we started (seen, or in one of their process groups) that are still running."""
        with self._lock:
            found = {p.pid: p for p in self.seen.values() if _alive(p)}
            pgids = set(self.pgids)
        for proc in psutil.process_iter():
            try:
                if os.getpgid(proc.pid) in pgids and proc.pid != os.getpid() and _alive(proc):
                    found.setdefault(proc.pid, proc)
            except (psutil.Error, OSError):
                continue
        return list(found.values())

    def kernels(self) -> list[psutil.Process]:
        """The live kernel processes among the server's descendants."""
        return [p for p in self.descendants(self.server_pid) if "ipykernel_launcher" in " ".join(_cmdline(p))]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


# ----------------------------------------------------------------------------------------------- JupyterLab


class JupyterLab:
    """A JupyterLab server of our own: its URL, root folder, process and process tracker."""

    def __init__(self, url: str, root: Path, process: subprocess.Popen, tracker: ProcessTracker, log: Path) -> None:
        self.url = url.rstrip("/")
        self.root = root
        self.process = process
        self.tracker = tracker
        self.log = log

    def api(self, method: str, path: str, timeout: float = 10.0) -> Any:
        """Call the server's REST API (no token: the server was started without one)."""
        request = urllib.request.Request(f"{self.url}{path}", method=method)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def wait_kernel_idle(self, timeout: float) -> dict:
        """Wait until one session exists and its kernel is idle; return the kernel model."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.api("GET", "/api/sessions")
            except (OSError, urllib.error.URLError) as exc:
                last = exc
            if isinstance(last, list) and last and last[0]["kernel"]["execution_state"] == "idle":
                return last[0]["kernel"]
            time.sleep(0.5)
        raise AssertionError(f"no idle kernel within {timeout:.0f} s; sessions: {last!r}")

    def kernel(self) -> dict:
        """The model of the one running kernel (``execution_state``, ``last_activity``, ...)."""
        kernels = self.api("GET", "/api/kernels")
        assert len(kernels) == 1, f"expected one kernel, the server runs {kernels}"
        return kernels[0]

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _isolated_env(base: Path) -> dict[str, str]:
    """Environment with Jupyter's config, data, runtime and IPython dirs inside ``base``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_", "JPY_"))}
    env.pop("IPYTHONDIR", None)
    env.update(
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        IPYTHONDIR=str(base / "ipython"),
        PYTHONUNBUFFERED="1",
        MPLBACKEND="Agg",
    )
    user_settings = base / "config" / "lab" / "user-settings" / "@jupyterlab"
    # No news/update toasts over the page, and every cell in the DOM (no virtual scrolling).
    _write_json(
        user_settings / "apputils-extension" / "notification.jupyterlab-settings",
        {"fetchNews": "false", "checkForUpdates": False},
    )
    _write_json(user_settings / "notebook-extension" / "tracker.jupyterlab-settings", {"windowingMode": "none"})
    return env


def _read_server_url(runtime: Path, pid: int) -> str | None:
    info = runtime / f"jpserver-{pid}.json"
    try:
        return json.loads(info.read_text())["url"]
    except (OSError, ValueError, KeyError):
        return None


def _wait_ready(process: subprocess.Popen, runtime: Path, log: Path) -> str:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"JupyterLab exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        url = _read_server_url(runtime, process.pid)
        if url:
            try:
                with urllib.request.urlopen(f"{url.rstrip('/')}/api/status", timeout=5) as response:
                    if response.status == 200:
                        return url
            except (OSError, urllib.error.URLError):
                pass
        time.sleep(0.5)
    raise AssertionError(f"JupyterLab did not answer within {SERVER_START_TIMEOUT:.0f} s:\n{log.read_text()}")


def _shutdown(lab: JupyterLab | None, process: subprocess.Popen, tracker: ProcessTracker | None) -> list[str]:
    """Shut kernels down via REST, terminate the server's group, and return what survived (then killed)."""
    if tracker:
        tracker.scan()
    if lab is not None:
        try:
            for kernel in lab.api("GET", "/api/kernels"):
                try:
                    lab.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
                except (OSError, urllib.error.URLError):
                    pass
        except (OSError, urllib.error.URLError, ValueError):
            pass
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if tracker is None:
        return []
    tracker.stop()
    deadline = time.monotonic() + 15.0
    survivors = tracker.survivors()
    while survivors and time.monotonic() < deadline:
        time.sleep(0.5)
        survivors = tracker.survivors()
    report = [_describe(p) for p in survivors]
    for proc in survivors:  # clean up whatever outlived a graceful shutdown, by pid
        try:
            proc.kill()
        except psutil.Error:
            pass
    return report


@pytest.fixture()
def jupyter_lab(tmp_path: Path, screenshots: Path) -> Iterator[JupyterLab]:
    """JupyterLab on 127.0.0.1 (free port), no token, isolated dirs, root holding the quickstart notebook.

    ``FASTDIST_LAB_E2E_NOTEBOOK`` may name another notebook to copy in as ``00_quickstart.ipynb``.
    Teardown: kernels shut down via ``DELETE /api/kernels/<id>``, the server's process group terminated,
    and an assertion that no process started by the server (kernel, workers, ...) is left.
    """
    source = Path(os.environ.get("FASTDIST_LAB_E2E_NOTEBOOK", NOTEBOOK))
    assert source.is_file(), f"missing notebook {source}"
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(source, root / "00_quickstart.ipynb")
    env = _isolated_env(tmp_path)
    log = screenshots / "jupyter-server.log"
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=0",  # the server picks a free port and writes it to the runtime dir: no race
        "--ServerApp.port_retries=0",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        "--LabApp.extension_manager=readonly",
        "--LabApp.news_url=None",
    ]
    with open(log, "w") as log_file:
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    tracker: ProcessTracker | None = None
    lab: JupyterLab | None = None
    try:
        tracker = ProcessTracker(process, root)
        url = _wait_ready(process, tmp_path / "runtime", log)
        assert url.startswith("http://127.0.0.1:"), url
        lab = JupyterLab(url, root, process, tracker, log)
        yield lab
    finally:
        survivors = _shutdown(lab, process, tracker)
    assert not survivors, "processes left running after shutdown (killed now):\n" + "\n".join(survivors)


# --------------------------------------------------------------------------------------------------- page


@pytest.fixture()
def page(
    request: pytest.FixtureRequest, chromium_executable: Path, jupyter_lab: JupyterLab, screenshots: Path
) -> Iterator[Any]:
    """A Chromium page (Playwright, sync API) on our JupyterLab; closed, with its processes checked, after."""
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {p.pid for p in me.children()}
    console = open(screenshots / "browser-console.log", "w")  # noqa: SIM115 (closed in finally)
    browser_procs: dict[int, psutil.Process] = {}

    def record_browser_processes() -> None:
        for top in me.children():
            if top.pid in before or top.pid == jupyter_lab.process.pid:
                continue
            for proc in [top, *top.children(recursive=True)]:
                browser_procs.setdefault(proc.pid, proc)

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(chromium_executable), args=CHROMIUM_ARGS)
            try:
                record_browser_processes()
                context = browser.new_context(viewport={"width": 1440, "height": 1000})
                context.set_default_timeout(60_000)
                tab = context.new_page()
                tab.on("console", lambda msg: console.write(f"[{msg.type}] {msg.text}\n"))
                tab.on("pageerror", lambda exc: console.write(f"[pageerror] {exc}\n"))
                yield tab
                failed = getattr(request.node, "rep_call", None)
                if failed is not None and failed.failed:
                    try:
                        tab.screenshot(path=str(screenshots / "99_failure.png"))
                    except Exception as exc:  # noqa: BLE001 (best effort only)
                        console.write(f"failure screenshot not taken: {exc}\n")
            finally:
                record_browser_processes()
                browser.close()
    finally:
        console.close()
    _, alive = psutil.wait_procs([p for p in browser_procs.values() if _alive(p)], timeout=10)
    left = [_describe(p) for p in alive if _alive(p)]
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    assert not left, "browser processes left running (killed now):\n" + "\n".join(left)
