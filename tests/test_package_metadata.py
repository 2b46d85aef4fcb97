"""Every package of the workspace is publishable: MIT licence file, ``py.typed``, a
``__version__`` equal to the installed distribution's version, classifiers and project URLs."""

from __future__ import annotations

import importlib
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # distribution -> (import name, folder holding pyproject.toml and LICENSE)
    "graphwm-envs": ("graphwm_envs", ROOT / "packages" / "graph-envs"),
    "gdm-models": ("gdm_models", ROOT / "packages" / "gdm-models"),
    "gdd-metric": ("gdd_metric", ROOT / "packages" / "gdd-metric"),
    "graphwm": ("graphwm", ROOT),
}


@pytest.mark.parametrize("dist", sorted(PACKAGES))
def test_package_is_publishable(dist):
    module_name, folder = PACKAGES[dist]
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    assert project["name"] == dist
    module = importlib.import_module(module_name)
    assert module.__version__ == project["version"] == metadata.version(dist)
    assert (Path(module.__file__).parent / "py.typed").is_file()
    assert project["license"] == "MIT"
    assert "MIT License" in (folder / "LICENSE").read_text()
    assert "Typing :: Typed" in project["classifiers"]
    assert {"Homepage", "Repository", "Changelog"} <= set(project["urls"])


def test_changelog_covers_every_distribution():
    text = (ROOT / "CHANGELOG.md").read_text()
    for dist in PACKAGES:
        assert dist in text


def test_graphwm_pins_its_siblings_to_their_minor_release():
    """graphwm's metadata accepts each sibling's bug-fix releases but not its next minor (a
    breaking release under 0.x): ``~=X.Y.Z`` over the sibling's version."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name: Requirement(r) for r in project["dependencies"]}
    for dist, (_, folder) in PACKAGES.items():
        if dist == "graphwm":
            continue
        version = Version(
            tomllib.loads((folder / "pyproject.toml").read_text())["project"]["version"]
        )
        spec = requirements[dist].specifier
        assert str(spec) == f"~={version}", f"{dist}: {spec or 'no version'}"
        major, minor, micro = version.release
        assert spec.contains(version) and spec.contains(f"{major}.{minor}.{micro + 1}")
        assert not spec.contains(f"{major}.{minor + 1}.0")
        assert metadata.version(dist) in spec  # the workspace install satisfies it


def test_graphwm_wheel_metadata_pins_the_siblings_and_links_absolutely(tmp_path):
    """What an index receives: the built wheel's Requires-Dist pins the siblings and its
    project page (the README as long description) has no relative link."""
    import re
    import shutil
    import subprocess
    import zipfile
    from email.parser import Parser

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    build = [uv, "build", "--wheel", "-q", "-o", str(tmp_path), str(ROOT)]
    result = subprocess.run(build, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:  # no network: the build backend may still be cached
        result = subprocess.run([*build, "--offline"], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot build the wheel here: {result.stderr[-300:]}")
    (wheel,) = tmp_path.glob("graphwm-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode())
    requires = {
        re.split(r"[\[~=<>!; ]", r, maxsplit=1)[0]: r
        for r in meta.get_all("Requires-Dist")
        if "extra ==" not in r  # the optional extras (ray, tensorboard) are not the core
    }
    # graphwm-envs with its agents extra: the downstream stage trains graphwm_envs.agents
    extras = {"graphwm-envs": "[agents]", "gdm-models": "", "gdd-metric": ""}
    for dist, extra in extras.items():
        assert requires[dist].replace(" ", "") == f"{dist}{extra}~={metadata.version(dist)}"
    page = meta.get_payload()
    assert "blob/main/docs/" in page
    relative = [t for t in re.findall(r"\]\(([^)\s]+)", page) if not re.match(r"https?:", t)]
    assert not relative, relative
