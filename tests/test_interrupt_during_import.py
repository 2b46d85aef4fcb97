"""A signal that comes while a module is being imported stops the run once the import is done
(:mod:`graphwm.store.interrupts`): raised inside the import it could abort torch's start-up
(exit -6) or come out wrapped in another error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: a module whose import takes a second, in short Python steps (a signal handler runs between)
SLOW_MODULE = "import time\nfor _ in range(100):\n    time.sleep(0.01)\nDONE = True\n"

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from graphwm.store.interrupts import Interrupted, raise_on_signals
    try:
        with raise_on_signals():
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            import slow_module  # the signal comes 0.2 s into its 1 s import
            print("imported", slow_module.DONE, flush=True)
            time.sleep(20)
            print("not interrupted", flush=True)
    except Interrupted as err:
        print("interrupted", err.signal_name, "slow_module" in sys.modules, flush=True)
    """
)


def test_a_signal_during_an_import_is_raised_after_it(tmp_path):
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["imported True", "interrupted SIGTERM True"]
