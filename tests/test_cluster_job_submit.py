"""``ray job submit`` as docs/cluster.md documents it (issue 48 item 5): a Ray head started
with its dashboard (the ``cluster`` extra, ``ray[default]``) on this machine, bound to
127.0.0.1 only, takes the narrowed tiny preset as a Ray job; the job's driver writes a
finished run.

Slow-marked: starting a head with its dashboard takes about 20 s on two cores and the job
(the tiny preset's every stage, ``--working-dir`` uploaded) about a minute.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_dashboard(url: str, head: subprocess.Popen, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if head.poll() is not None:
            raise RuntimeError(f"the Ray head exited with {head.returncode}")
        try:
            urllib.request.urlopen(url + "/api/version", timeout=2)
            return
        except urllib.error.HTTPError:  # any HTTP answer (401 without the token): it is up
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"no dashboard at {url} after {timeout} s")


@pytest.fixture
def head():
    """A Ray head with its dashboard on 127.0.0.1 (free ports, its own temp folder and token:
    another Ray on this machine is never touched); yields ``(dashboard URL, env)``."""
    pytest.importorskip("ray")
    gcs, dashboard = _free_port(), _free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # the job's `graphwm`
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",  # Ray's token authentication, with a token of this test's
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "OMP_NUM_THREADS": "1",
    }
    args = [
        str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}",
        "--node-ip-address=127.0.0.1", "--include-dashboard=true",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", "--num-cpus=2",
        f"--temp-dir={temp}", "--disable-usage-stats",
    ]  # fmt: skip
    log = open(Path(temp) / "head.log", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{dashboard}"
    try:
        _wait_for_dashboard(url, proc)
        yield url, env
    finally:
        # the head's own process group (ray start --block and what it started): never
        # `ray stop`, which would stop every Ray of this user on the machine
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_job_submit_runs_the_tiny_preset(head, tmp_path):
    url, env = head
    out = tmp_path / "run"  # absolute: the job's working directory is Ray's unpacked copy
    command = [
        str(BIN / "ray"), "job", "submit", "--address", url, "--working-dir", str(REPO), "--",
        "graphwm", "reproduce", "--preset", "tiny", "--envs", "SAR", "--models",
        "vanilla-gwm", "--quiet", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "succeeded" in done.stdout + done.stderr
    record = json.loads((out / "run.json").read_text())
    assert record["preset"] == "tiny" and record["failed"] == []
    kinds = {Path(p).name.split("-")[0] for p in record["results"]}
    assert {"single_step", "multi_step", "self_gdd"} <= kinds
    assert (out / "report" / "report.md").is_file()
