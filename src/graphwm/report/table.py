"""The table model of the report: label columns plus ``mean ± CI`` cells.

Built by :mod:`graphwm.report.tables`, rendered by :mod:`graphwm.report.formatting`, so Markdown
and LaTeX always agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from graphwm.report.seed_stats import SeedStats

__all__ = ["Cell", "Row", "Table", "mark_best"]


@dataclass
class Cell:
    """One ``mean ± CI`` cell; ``bold`` marks the best (lowest mean) entry of its column group.

    ``noise``: the evaluation-noise SD of the mean (:mod:`graphwm.report.eval_noise`), shown
    after the seed interval as ``(eval SD x)``; None where unknown.
    """

    stats: SeedStats
    bold: bool = False
    noise: float | None = None


@dataclass
class Row:
    """A table row: label strings (env, model, ...) followed by value cells (None = missing)."""

    labels: list[str]
    cells: list[Cell | None]
    group_start: bool = False


@dataclass
class Table:
    """A result table rendered identically to Markdown and LaTeX."""

    name: str
    caption: str
    label_columns: list[str]
    value_columns: list[str]
    rows: list[Row] = field(default_factory=list)
    digits: int = 3
    scientific: bool = False
    bold_best: bool = True
    notes: list[str] = field(default_factory=list)  # footnotes under the table

    def has_noise(self) -> bool:
        """Whether some cell carries an evaluation-noise SD."""
        return any(c is not None and c.noise is not None for row in self.rows for c in row.cells)

    def seed_counts(self) -> list[int]:
        """Number of seeds of every present cell."""
        return [c.stats.n for row in self.rows for c in row.cells if c is not None]


def mark_best(cells: Sequence[Cell | None]) -> None:
    """Bold the cell(s) with the lowest finite mean (ties all bold; NaN/inf never bold)."""
    finite = [c for c in cells if c is not None and math.isfinite(c.stats.mean)]
    if not finite:
        return
    best = min(c.stats.mean for c in finite)
    for c in finite:
        c.bold = c.stats.mean == best
