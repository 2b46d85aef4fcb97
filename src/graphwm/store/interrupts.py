"""SIGINT and SIGTERM as one exception, :class:`Interrupted`.

A cluster scheduler stops a job with SIGTERM (then SIGKILL after a grace period); a terminal
sends SIGINT. :func:`raise_on_signals` turns both into :class:`Interrupted`, a
``KeyboardInterrupt``, so the executors stop their workers the same way for either and the
CLI exits with the conventional ``128 + signal`` (130 for SIGINT, 143 for SIGTERM).

A signal that comes while a module is being imported is delivered again
:data:`IMPORT_RETRY_S` later, until no import is running: an exception raised inside an
import can reach C++ code that cannot pass it on (torch's start-up then aborts the process,
exit -6) or be wrapped in another error (``RuntimeError: Error calling __set_name__``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

__all__ = ["SIGNALS", "Interrupted", "raise_on_signals"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# the signal received inside the current raise_on_signals block: a library that catches the
# handler's Interrupted and raises a plain KeyboardInterrupt instead (Ray's ray.wait does)
# must not turn a SIGTERM into a SIGINT
_received: list[int] = []
#: seconds after which a signal that came during an import is delivered again
IMPORT_RETRY_S = 0.05


class Interrupted(KeyboardInterrupt):
    """A signal stopped the run.

    Attributes:
        signum: the signal received (``signal.SIGINT`` for a plain ``KeyboardInterrupt``).
        jobs: descriptions of the jobs that were running or queued when it came (set by the
            executor that stopped them; empty when no job was running).
    """

    def __init__(self, signum: int = signal.SIGINT, jobs: Sequence[str] = ()) -> None:
        self.signum = int(signum)
        self.jobs = list(jobs)
        super().__init__(self.signal_name)

    @property
    def signal_name(self) -> str:
        """``"SIGINT"`` or ``"SIGTERM"``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: ``128 + signum``."""
        return 128 + self.signum

    @classmethod
    def of(cls, err: KeyboardInterrupt, jobs: Sequence[str] = ()) -> Interrupted:
        """``err`` with ``jobs`` attached; a plain ``KeyboardInterrupt`` is the signal received
        inside :func:`raise_on_signals` if there was one, else SIGINT."""
        if isinstance(err, Interrupted):
            signum = err.signum
        else:
            signum = _received[0] if _received else signal.SIGINT
        return cls(signum, [*getattr(err, "jobs", []), *jobs])


@contextlib.contextmanager
def raise_on_signals() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM raise :class:`Interrupted` (once: a second signal
    while the workers are being stopped is ignored, so the clean-up runs to its end).

    Outside the main thread (where Python cannot install handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()

    def handler(signum: int, frame: FrameType | None) -> None:
        if _received:
            return
        if _importing(frame):  # the module docstring: raised here it may abort the process
            later = threading.Timer(IMPORT_RETRY_S, os.kill, (os.getpid(), signum))
            later.daemon = True
            later.start()
            return
        _received.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _received.clear()


def _importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (importlib's frames are below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
