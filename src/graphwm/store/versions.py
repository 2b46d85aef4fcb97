"""The code version of a run: the four packages' versions and a digest of their source.

Recorded in ``run.json`` (``code``) by the driver and checked by every job on every node
(:func:`check_code`): a node with a stale checkout or another release refuses its jobs, naming
both digests, instead of silently mixing results of two codes in one run.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path

PACKAGES = ("graphwm", "graphwm_envs", "gdm_models", "gdd_metric")


class CodeMismatchError(RuntimeError):
    """A node runs other code than the driver."""


@functools.cache
def code_digest() -> str:
    """SHA-256 (16 hex digits) of every ``.py`` and ``.toml`` file of the four packages, by
    path relative to its package and content."""
    h = hashlib.sha256()
    for name in PACKAGES:
        root = Path(importlib.import_module(name).__file__ or "").parent
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                h.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
                h.update(path.read_bytes())
                h.update(b"\0")
    return h.hexdigest()[:16]


def code_record() -> dict:
    """``run.json``'s ``code``: versions and source digest."""
    from graphwm.store.files import code_versions

    return {"versions": code_versions(), "digest": code_digest()}


def check_code(expected: str) -> None:
    """Raise :class:`CodeMismatchError` unless this process runs the code of digest
    ``expected``."""
    import socket

    here = code_digest()
    if here != expected:
        node = f"{socket.gethostname()}{_ray_node_id()}"
        raise CodeMismatchError(
            f"node {node} runs graphwm code {here}, the driver {expected}: "
            "install the same checkout on every node, or let the ray executor ship it "
            "(GRAPHWM_RAY_SHIP_CODE=1, the default; see docs/cluster.md)"
        )


def _ray_node_id() -> str:
    """`` (Ray node id ...)`` inside a Ray worker, else ``""`` (a host name alone does not
    tell two nodes of one machine apart)."""
    import sys

    ray = sys.modules.get("ray")  # never imported here just to ask
    try:
        if ray is not None and ray.is_initialized():
            return f" (Ray node id {ray.get_runtime_context().get_node_id()})"
    except Exception:  # the id only decorates the message
        pass
    return ""


def package_dirs() -> list[str]:
    """The source folders of the four packages (what the ray executor ships as
    ``py_modules``)."""
    return [str(Path(importlib.import_module(n).__file__ or "").parent) for n in PACKAGES]
