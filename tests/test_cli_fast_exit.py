"""The ``graphwm`` command ends with :func:`graphwm.cli.exit_now`: everything the interpreter's
own exit does that a user can see (threads joined, ``atexit`` handlers, stdout and stderr
flushed, the exit code) without its module teardown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a child that runs graphwm.cli.run with main() replaced: a non-daemon thread still writing,
#: an atexit handler, unterminated output on both streams, exit code 3
CHILD = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from graphwm import cli

    def late_writer():
        time.sleep(0.3)
        sys.stdout.write("thread done;")

    def main():
        threading.Thread(target=late_writer).start()  # non-daemon: joined before exit
        atexit.register(lambda: sys.stdout.write("atexit ran;"))
        sys.stdout.write("unflushed stdout;")
        sys.stderr.write("unflushed stderr")
        return 3

    cli.main = main
    cli.run()
    """
)


def test_exit_now_joins_threads_runs_atexit_flushes_and_keeps_the_code():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3
    assert done.stdout == "unflushed stdout;thread done;atexit ran;"
    assert done.stderr == "unflushed stderr"


def test_the_console_script_and_module_use_run():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["graphwm"] == "graphwm.cli:run"
    done = subprocess.run(
        [sys.executable, "-m", "graphwm.cli", "report", str(ROOT / "no-such-run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("graphwm: error:")
