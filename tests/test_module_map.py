"""The docs' map of the code cannot drift (issue 36): docs/architecture.md ("Module map") and
each package README ("Modules") list every module of the four packages, and every file they
name exists.

A map is a bullet list, one bullet per folder: ``- `gdm_models/training/`: `step.py` (...),
...``; every ``.py`` named on a folder's bullet (continuation lines included) is a module of
that folder. Any other ``*.py`` in backticks in these files must exist: a path with a ``/``
under the repository, ``src/``, a package folder or its ``src/`` or import folder; a bare name
as some module, benchmark or test of the repository (``{a,b}`` and ``*`` expand).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> its folder
PACKAGES = {
    "graphwm": ROOT / "src" / "graphwm",
    "graphwm_envs": ROOT / "packages" / "graph-envs" / "src" / "graphwm_envs",
    "gdm_models": ROOT / "packages" / "gdm-models" / "src" / "gdm_models",
    "gdd_metric": ROOT / "packages" / "gdd-metric" / "src" / "gdd_metric",
}
READMES = {name: folder.parents[1] / "README.md" for name, folder in PACKAGES.items()}
del READMES["graphwm"]  # the integration package: docs/architecture.md maps it
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def modules(package: str) -> set[str]:
    """Every module of ``package`` as ``<import name>/<path>.py`` (``__init__.py`` aside: a
    folder's bullet stands for it)."""
    folder = PACKAGES[package]
    return {
        p.relative_to(folder.parent).as_posix()
        for p in folder.rglob("*.py")
        if p.name != "__init__.py"
    }


def _section(text: str, heading: str) -> str:
    """The text under the Markdown heading ``heading`` (any level) up to the next heading of
    the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert m, f"no heading {heading!r}"
    level = len(m.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[m.end() :], re.M)
    return text[m.end() : m.end() + end.start() if end else len(text)]


def mapped(section: str) -> set[str]:
    """The modules a map lists: ``<folder>/<name>.py`` for each ``.py`` on a folder's bullet."""
    out: set[str] = set()
    folder = None
    for line in section.splitlines():
        bullet = re.match(r"^[-*] `([\w/]+/)`", line)
        if bullet:
            folder = bullet.group(1)
        elif not line.startswith((" ", "\t")) or not line.strip():
            folder = None  # a line that does not continue the bullet
        if folder is None:
            continue
        for name in re.findall(r"`([\w.]+\.py)`", line):
            out.add(folder + name)
    return out


def _expand(token: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", token)
    if not m:
        return [token]
    return [
        x
        for alt in m.group(1).split(",")
        for x in _expand(token[: m.start()] + alt + token[m.end() :])
    ]


def _exists(name: str) -> bool:
    if "/" in name:
        bases = [ROOT, ROOT / "src", *ROOT.glob("packages/*"), *ROOT.glob("packages/*/src")]
        bases += list(PACKAGES.values())
        return any(any(base.glob(name)) for base in bases)
    every = [
        *ROOT.glob("src/**/*.py"),
        *ROOT.glob("packages/*/src/**/*.py"),
        *ROOT.glob("packages/*/benchmarks/*.py"),
        *ROOT.glob("packages/*/tests/*.py"),
        *ROOT.glob("benchmarks/*.py"),
        *ROOT.glob("tests/*.py"),
    ]
    return any(fnmatch.fnmatch(p.name, name) for p in every)


def named_files(text: str) -> list[str]:
    """Every ``*.py`` named in backticks (one token, no spaces), expanded."""
    return [x for tok in re.findall(r"`([^`\s]+\.py)`", text) for x in _expand(tok)]


def test_architecture_maps_every_module_of_the_four_packages():
    section = _section(ARCHITECTURE.read_text(encoding="utf-8"), "Module map")
    listed = mapped(section)
    actual = set().union(*(modules(p) for p in PACKAGES))
    assert not actual - listed, f"docs/architecture.md, Module map: add {sorted(actual - listed)}"
    assert not listed - actual, (
        f"docs/architecture.md, Module map: no such module {sorted(listed - actual)}"
    )


@pytest.mark.parametrize("package", sorted(READMES))
def test_each_package_readme_lists_its_modules(package):
    readme = READMES[package]
    listed = mapped(_section(readme.read_text(encoding="utf-8"), "Modules"))
    actual = modules(package)
    where = readme.relative_to(ROOT)
    assert not actual - listed, f"{where}, Modules: add {sorted(actual - listed)}"
    assert not listed - actual, f"{where}, Modules: no such module {sorted(listed - actual)}"


@pytest.mark.parametrize("doc", [ARCHITECTURE, *READMES.values()], ids=lambda p: p.parent.name)
def test_every_file_the_docs_name_exists(doc):
    missing = [n for n in named_files(doc.read_text(encoding="utf-8")) if not _exists(n)]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


def test_the_map_reader_catches_drift():
    """The checks would fail: a module left out, a file that does not exist."""
    section = "- `gdm_models/training/`: `step.py` (the step),\n  `loop.py`\n\nprose `x.py`\n"
    assert mapped(section) == {"gdm_models/training/step.py", "gdm_models/training/loop.py"}
    assert "gdm_models/training/engines.py" in modules("gdm_models") - mapped(section)
    assert not _exists("gdm_models/training_loop.py") and not _exists("metric_graph.py")
    assert _exists("graphwm_envs/{sar,od}/env.py".replace("{sar,od}", "sar"))
    assert named_files("`a/{b,c}.py` and `uv run x.py --flag`") == ["a/b.py", "a/c.py"]
