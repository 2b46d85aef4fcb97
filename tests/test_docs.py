"""Every Python code block of the user docs runs as written (issue 13 item 4).

Files: README.md, docs/**/*.md and packages/*/README.md. How blocks run (also written in
docs/architecture.md, "Docs that run"):

* blocks of one file run in order in one namespace (a fresh one per file), like a notebook:
  a block may use names an earlier block of the same file defined, never names from elsewhere;
* a block made of ``>>>`` prompts runs as a doctest (its outputs are checked) in that namespace;
* the working directory is a fresh temporary folder, so a block may write files;
* ```` ```python no-run ```` marks a block that must not run (it needs a finished experiment
  run or hours of compute); use it sparingly, each use is listed in ``NO_RUN_ALLOWED``;
* ```` ```json ```` blocks must parse as JSON.
"""

from __future__ import annotations

import doctest
import json
import re
import tempfile
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)

#: (file, number of no-run blocks) that are allowed; anything else must run.
NO_RUN_ALLOWED = {"docs/reporting.md": 1}


def doc_files() -> list[Path]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    files += sorted(REPO.glob("packages/*/README.md"))
    return files


def blocks(path: Path) -> list[tuple[str, str, int]]:
    """(info string, code, line number) of every fenced block of ``path``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        body = m.group("body")
        indent = m.group("indent")
        if indent:  # a fence inside a list item: strip the item's indentation
            body = "".join(
                line[len(indent) :] if line.startswith(indent) else line
                for line in body.splitlines(keepends=True)
            )
        out.append((m.group("info").strip(), body, text.count("\n", 0, m.start()) + 2))
    return out


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def run_file(path: Path) -> int:
    """Run the Python blocks of ``path`` in one namespace; return how many ran."""
    namespace: dict = {"__name__": f"docs:{rel(path)}"}
    ran = 0
    for info, code, line in blocks(path):
        words = info.split()
        lang = words[0] if words else ""
        if lang == "json":
            json.loads(code)
        if lang != "python" or "no-run" in words[1:]:
            continue
        name = f"{rel(path)}:{line}"
        if code.lstrip().startswith(">>>"):
            test = doctest.DocTestParser().get_doctest(code, namespace, name, str(path), line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test, clear_globs=False)
            assert runner.failures == 0, f"doctest block at {name} failed (output above)"
        else:
            exec(compile(code, name, "exec", dont_inherit=True), namespace)  # as a user runs it
        ran += 1
    return ran


def test_blocks_are_found():
    """The extractor sees the blocks (so the test below cannot pass by finding none)."""
    found = {rel(p): [b[0] for b in blocks(p)] for p in doc_files()}
    assert found["docs/quickstart.md"].count("python") == 1
    assert found["docs/gdd-metric.md"].count("python") >= 2
    assert found["packages/gdd-metric/README.md"] == ["python"]
    python = sum(info.split()[:1] == ["python"] for infos in found.values() for info in infos)
    assert python >= 10


def test_no_run_is_used_sparingly():
    for path in doc_files():
        count = sum("no-run" in info.split()[1:] for info, _, _ in blocks(path))
        assert count <= NO_RUN_ALLOWED.get(rel(path), 0), f"{rel(path)}: {count} no-run blocks"


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_doc_code_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # temporary files the examples make (SB3's default logger makes a /tmp/SB3-<time> folder)
    # land in tmp_path, not in the machine's temp dir
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run_file(path)


def _fancy_readme(pyproject: dict) -> tuple[str, list[dict]] | None:
    """(README path, link substitutions) when the readme is built by hatch-fancy-pypi-readme
    (the root README: relative links in the clone, made absolute for the index page)."""
    hook = pyproject.get("tool", {}).get("hatch", {}).get("metadata", {}).get("hooks", {})
    fancy = hook.get("fancy-pypi-readme")
    if not fancy or "readme" not in pyproject["project"].get("dynamic", []):
        return None
    (fragment,) = fancy["fragments"]
    return fragment["path"], fancy.get("substitutions", [])


def _project_pages() -> list[tuple[Path, dict, list[dict]]]:
    """(README, [project] table, link substitutions of the build) of every pyproject.toml
    whose readme is an index page."""
    pages = []
    for pyproject in sorted([REPO / "pyproject.toml", *REPO.glob("packages/*/pyproject.toml")]):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        project = data["project"]
        fancy = _fancy_readme(data)
        readme, subs = fancy if fancy else (project.get("readme"), [])
        readme = readme.get("file") if isinstance(readme, dict) else readme
        if readme:
            pages.append((pyproject.parent / readme, project, subs))
    return pages


def _links(text: str) -> list[str]:
    return [
        *re.findall(r"\]\(\s*<?([^)\s>]+)", text),  # [text](target), ![alt](target)
        *re.findall(r"(?m)^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", text),  # [ref]: target
        *re.findall(r"""(?:href|src)\s*=\s*["']([^"']+)["']""", text),  # HTML
    ]


def test_every_readme_that_is_a_project_page_is_checked():
    assert {rel(readme) for readme, _, _ in _project_pages()} >= {
        "README.md",
        *(rel(p) for p in REPO.glob("packages/*/README.md")),
    }


@pytest.mark.parametrize("page", _project_pages(), ids=lambda page: rel(page[0]))
def test_project_page_links_are_absolute(page):
    """A README declared as ``readme`` is also the package's page on an index, where
    ``docs/x.md`` or ``../../docs`` breaks: its links (inline, reference-style, images, HTML)
    are absolute there, and those into this repository (the ``Repository`` URL in its
    pyproject.toml, then ``/blob/main/<path>``) name files that exist. The root README links
    relatively, so that its links also work in a clone: the build rewrites them (checked here
    through the same substitutions, and on the built wheel by test_package_metadata)."""
    readme, project, subs = page
    text = readme.read_text(encoding="utf-8")
    for target in _links(text):  # in the clone: a relative link names a file that exists
        if not re.match(r"(https?|mailto):|#", target):
            assert subs, f"{rel(readme)}: relative link {target} (the page is not rewritten)"
            assert (readme.parent / target.split("#")[0]).exists(), f"{rel(readme)}: {target}"
    for sub in subs:  # the index page
        text = re.sub(sub["pattern"], sub["replacement"], text)
    targets = _links(text)
    assert targets or readme.parent != REPO, "the root README links the docs"
    repo_url = project.get("urls", {}).get("Repository")
    for target in targets:
        assert re.match(r"(https?|mailto):", target), f"{rel(readme)}: relative link {target}"
        if repo_url and target.startswith(f"{repo_url}/blob/main/"):
            path = target.removeprefix(f"{repo_url}/blob/main/").split("#")[0]
            assert (REPO / path).exists(), f"{rel(readme)}: {target} names no file"


def test_no_reference_to_a_missing_architecture_file():
    """docs/architecture.md exists and replaces the ARCHITECTURE.md cited before."""
    assert (REPO / "docs" / "architecture.md").is_file()
    sources = [*doc_files(), *REPO.glob("src/**/*.py"), *REPO.glob("packages/*/src/**/*.py")]
    stale = [rel(p) for p in sources if "ARCHITECTURE" in p.read_text(encoding="utf-8")]
    assert not stale, f"files citing ARCHITECTURE.md: {stale}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, code marks and punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (a repeated heading's with GitHub's -1, -2, ...)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for heading in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*#*$", text):
        slug, n = _slug(heading), 0
        while (slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _relative_links(path: Path) -> list[str]:
    """Relative link targets of ``path`` outside code (fenced blocks and inline code)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [t for t in _links(text) if not re.match(r"(https?|mailto):", t)]


@pytest.mark.parametrize(
    "path", [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))], ids=rel
)
def test_relative_links_resolve(path):
    """Every relative link of the README and the docs names a file that exists, and an anchor
    (``file.md#section`` or ``#section``) names a heading of that file (so moving a section,
    e.g. into docs/notes/, cannot leave a dead link)."""
    broken = []
    for target in _relative_links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {rel(dest)})")
    assert not broken, f"{rel(path)}: broken links {broken}"


def test_link_check_sees_links_and_anchors():
    """The checker finds what it checks: headings' anchors as GitHub makes them, and links
    outside code only."""
    models = REPO / "docs" / "models.md"
    assert {"ensemble-training-ensemblepy", "adding-a-model", "what-it-costs"} <= _anchors(models)
    assert any(t.startswith("notes/") for t in _relative_links(models))
    assert _slug("The `WorldModel` API (`world_model.py`)") == "the-worldmodel-api-world_modelpy"
