"""Issue 30, "noise on a clean stop": stopping the local pool must not print the pool
manager's ``InvalidStateError: CANCELLED`` traceback (a race of ``concurrent.futures`` on
cancelled futures), while any other thread error is still printed.

The race itself is timing-dependent, so the test makes it happen for certain: the pool's
``shutdown`` (called by ``_stop_pool``) runs a thread that raises the manager's error."""

from __future__ import annotations

import threading
from concurrent.futures import InvalidStateError

import pytest

from graphwm.store.executors import _stop_pool


class _Pool:
    """Stands in for the ProcessPoolExecutor: its manager thread fails as in the race."""

    _processes: dict = {}

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        def manager() -> None:
            raise self.error

        t = threading.Thread(target=manager, name="QueueManagerThread")
        t.start()
        t.join()


@pytest.fixture
def printed(monkeypatch):
    """The thread errors that would be printed: a recording ``threading.excepthook`` (the
    hook a thread's uncaught error goes to; by default it prints the traceback)."""
    seen: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(args.exc_value))
    return seen


def test_the_managers_invalid_state_error_is_not_printed(printed):
    _stop_pool(_Pool(InvalidStateError("CANCELLED: <Future at 0x0 state=cancelled>")), [])
    assert printed == []


def test_any_other_thread_error_is_still_printed_and_the_hook_restored(printed):
    before = threading.excepthook
    _stop_pool(_Pool(ValueError("a real failure")), [])
    assert [type(e) for e in printed] == [ValueError]
    assert threading.excepthook is before


def test_without_the_guard_the_error_reaches_the_hook(printed):
    """The same thread outside ``_stop_pool`` reaches the printing hook: what a stop
    printed before."""
    _Pool(InvalidStateError("CANCELLED")).shutdown()
    assert [type(e) for e in printed] == [InvalidStateError]


_LEAK = """
import multiprocessing as mp, os, sys
if sys.argv[1] == "quiet":
    from graphwm.cli import _quiet_resource_tracker
    _quiet_resource_tracker()
semaphore = mp.get_context("spawn").Semaphore()  # registered with the resource tracker
os._exit(0)  # as a pool worker ended by a signal: the semaphore is never released
"""


@pytest.mark.parametrize(("mode", "warned"), [("loud", True), ("quiet", False)])
def test_the_leaked_semaphore_warning_is_filtered(mode, warned, tmp_path):
    """The resource tracker's "leaked semaphore" warning after workers ended by a signal:
    printed by a plain interpreter, filtered by graphwm's CLI (what ``main`` sets up)."""
    import subprocess
    import sys

    script = tmp_path / "leak.py"
    script.write_text(_LEAK)
    res = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, timeout=60
    )
    assert ("leaked semaphore" in res.stderr) is warned, res.stderr
