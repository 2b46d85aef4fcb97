"""The training package's shape (issue 36): one step body, one clipping function, small
modules, functions and classes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import gdm_models.training as training

PACKAGE = Path(training.__file__).parent
REPO = PACKAGE.parents[4]
#: every place that could carry a copy of the step: the packages, graphwm, the benchmarks
SOURCES = [
    *REPO.glob("packages/*/src/**/*.py"),
    *REPO.glob("src/graphwm/**/*.py"),
    *REPO.glob("packages/*/benchmarks/*.py"),
    *REPO.glob("benchmarks/*.py"),
]


def _code(path: Path) -> str:
    """The file without its comments and docstrings (so prose naming a call does not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body[0] = ast.Pass()
    return ast.unparse(tree)


def test_one_step_body_and_one_clipping():
    """The backward + clipping + optimizer step of training exists once (``train_step``), the
    clipping once (``clip_grad_norms_``): nothing else in the packages, graphwm or the
    benchmarks clips gradients or pairs a backward with an optimizer step."""
    clipping = {p for p in SOURCES if re.search(r"clip_grad_norm\w*\(", _code(p))}
    assert clipping == {PACKAGE / "step.py"}, sorted(str(p) for p in clipping)
    defs = re.findall(r"^def (clip_grad\w*)\(", (PACKAGE / "step.py").read_text(), re.M)
    assert defs == ["clip_grad_norms_"]
    steps = {p for p in SOURCES if re.search(r"\.backward\(", _code(p)) and "opt" in _code(p)
             and re.search(r"\bopt\w*\.step\(", _code(p))}  # fmt: skip
    assert steps == {PACKAGE / "step.py"}, sorted(str(p) for p in steps)


def test_small_modules_functions_and_classes():
    """No module of gdm_models.training over 500 lines, no class over 300, no function over
    80, docstrings (and decorators) included (issue 45)."""
    too_long = []
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            n = node.end_lineno - first + 1  # type: ignore[operator]
            limit = 300 if isinstance(node, ast.ClassDef) else 80
            if n > limit:
                too_long.append(f"{path.name}: {node.name} {n} lines")
    assert not too_long, too_long
