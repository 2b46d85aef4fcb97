"""Tests of graphwm.report.build (stage 8): tables and figures from a hand-made results store."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import single_step_record

from graphwm.report.build import (
    ResultsFormatError,
    build_report,
    load_results,
    load_training_logs,
    mean_ci,
    t_critical,
)
from graphwm.report.figures import mean_curve, smooth
from graphwm.report.tables import format_mean_ci
from graphwm.store.records import seal

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T_975_2 = 4.302652729911275  # t_{0.975, 2} (statistical tables)

# Hand-made per-seed GDD at (env, size): SAR N=20 is the hand-checked cell.
SAR20 = {"gdm": [1.0, 2.0, 3.0], "g-rssm": [2.0, 3.0, 4.0], "ea-gwm": [0.5, 0.6, 0.7]}


def _gdd(env: str, model: str, size: int, seed: int) -> float:
    if env == "SAR" and size == 20 and model in SAR20:
        return SAR20[model][seed]
    base = {"gdm": 0.1, "g-rssm": 0.3, "ea-gwm": 0.2, "gdm:no-h-plus": 0.15}[model]
    if env == "OD" and model == "g-rssm" and size == 30 and seed == 1:
        return math.nan  # a broken seed must show as nan, not crash
    if env == "OD" and model == "ea-gwm" and size == 50:
        return math.inf
    return base * (1 + size / 100) + 0.01 * seed


def _single(env: str, model: str, size: int, seed: int) -> dict:
    gdd = _gdd(env, model, size, seed)
    features = {"stability": 0.01 * (seed + 1), "reward": 0.1, "continuation": 0.02}
    if env == "OD":
        features = {"opinion": 0.03 * (seed + 1), "reward": 0.2}
    components = {"node": 0.1 * seed, "graph": 0.2, "edge": 0.3 + size, "joint": 0.01}
    if env == "OD" and model == "g-rssm" and size == 20 and seed == 1:
        components["node"] = math.nan
    # the unbiased estimator's GDD; one EA-GWM seed is a record of an older run without it
    unbiased = {} if model == "ea-gwm" and seed == 2 else {"gdd_unbiased": gdd - 0.5}
    return single_step_record(
        env,
        model,
        size,
        seed,
        gdd,
        gdd_episodes=[gdd, gdd],
        components=components,
        factor_metrics={"adjacency_bce": 0.05 + seed, "features": features},
        num_transitions=40,
        indistinguishable=0.1 * (seed + 1) if model == "gdm" else 0.0,
        num_permutations=200,
        alpha=0.05,
        some_future_key={"ignored": True},
        **unbiased,
    )


def _multi(env: str, model: str, seed: int) -> dict:
    horizons = [1, 2, 3, 4, 5]
    scale = {"gdm": 1.0, "g-rssm": 2.0, "ea-gwm": 3.0}[model]
    gdd = [scale * h + seed for h in horizons]
    return {
        "kind": "multi_step",
        "env": env,
        "model": model,
        "seed": seed,
        "size": 50,
        "horizons": horizons,
        "gdd": gdd,
        "components": {c: [0.1 * h for h in horizons] for c in ("node", "graph", "edge", "joint")},
        "invalid_rate_model": [0.05 * h for h in horizons],
        "invalid_rate_env": [0.02 * h for h in horizons],
        # only the GDM's records hold the unbiased estimator (the others: an older run's)
        **({"gdd_unbiased": [g - 0.5 for g in gdd]} if model == "gdm" else {}),
    }


def _write(run: Path, name: str, obj: dict) -> None:
    (run / "results").mkdir(parents=True, exist_ok=True)
    # json.dumps writes NaN/Infinity tokens, as Python's json module does by default.
    # a stored record carries the digest of its content (graphwm.store.records.seal)
    (run / "results" / f"{name}.json").write_text(json.dumps(seal(json.loads(json.dumps(obj)))))


def _write_log(run: Path, env: str, model: str, seed: int, terms: list[str], n: int) -> None:
    folder = run / "train" / env / model.replace(":", "__") / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [",".join(["step", "total", *terms])]
    for i in range(n):
        total = 10.0 / (i + 1) + seed
        lines.append(",".join([str(10 * i), repr(total)] + ["0.5"] * len(terms)))
    (folder / "log.csv").write_text("\n".join(lines) + "\n")


def make_run(run: Path, envs: tuple[str, ...] = ("SAR", "OD", "RGC")) -> Path:
    """A synthetic run: envs SAR/OD/RGC, 3 models, sizes 20/30/50 (RGC 20/30), 3 seeds."""
    kinds = ("single", "multi", "self", "ablation")
    models = ("gdm", "g-rssm", "ea-gwm")
    sizes = {"SAR": (20, 30, 50), "OD": (20, 30, 50), "RGC": (20, 30)}
    for env in envs:
        env_sizes = sizes[env]
        for seed in range(3):
            for size in env_sizes:
                if "single" in kinds:
                    for model in models:
                        _write(
                            run, f"ss-{env}-{model}-{size}-{seed}", _single(env, model, size, seed)
                        )
                if "ablation" in kinds and size in (20, 50) and env != "RGC":
                    rec = _single(env, "gdm:no-h-plus", size, seed)
                    _write(run, f"ab-{env}-{size}-{seed}", rec)
                if "self" in kinds:
                    g = 0.0 if env == "RGC" else 1e-4 * (seed + 1)
                    u = 0.0 if env == "RGC" else 1e-5 * (seed - 1)
                    obj = {"kind": "self_gdd", "env": env, "size": size, "seed": seed, "gdd": g}
                    obj["gdd_unbiased"] = u
                    _write(run, f"self-{env}-{size}-{seed}", obj)
            if "multi" in kinds and env != "RGC":
                for model in models:
                    _write(run, f"ms-{env}-{model}-{seed}", _multi(env, model, seed))
            for model in models:
                _write_log(run, env, model, seed, [f"term_{model}"], 25 + seed)
            _write_log(run, env, "gdm:no-h-plus", seed, ["kl"], 12)
    return run


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> tuple[Path, object]:
    run = make_run(tmp_path_factory.mktemp("run"))
    return run, build_report(run)


def _row(markdown: str, model: str, env: str | None = None) -> list[str]:
    """Cells of the first table row of ``model`` (after the line naming ``env``, if given)."""
    lines = markdown.splitlines()
    start = 0
    if env is not None:
        start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {env} |"))
    for line in lines[start:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and model in cells[:3]:
            return cells
    raise AssertionError(f"no row for {model} in\n{markdown}")


# ---------------------------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------------------------
def test_mean_ci_of_equal_values_is_exactly_zero():
    # np.std of three copies of 0.1 is 1.7e-17, which a table would print as "± 1.70e-17"
    assert np.std([0.1] * 3, ddof=1) > 0
    s = mean_ci([0.1, 0.1, 0.1])
    assert s.ci == 0.0 and s.n == 3
    assert format_mean_ci(s, scientific=True) == "1.00e-01 ± 0"
    assert mean_ci([0.1, 0.1, 0.1 + 1e-15]).ci > 0  # a real (tiny) spread is kept


def test_mean_ci_hand_computed():
    s = mean_ci([1.0, 2.0, 3.0])
    assert t_critical(3) == pytest.approx(T_975_2, rel=1e-9)
    assert s.mean == 2.0 and s.n == 3
    assert s.ci == pytest.approx(T_975_2 * 1.0 / math.sqrt(3))
    assert format_mean_ci(s) == "2.000 ± 2.484"
    # one seed: no interval, the plain value (never a measured-looking "± 0.000"), with a
    # dagger only where the table has intervals elsewhere
    assert mean_ci([0.7]).n == 1
    assert format_mean_ci(mean_ci([0.7])) == "0.700"
    assert format_mean_ci(mean_ci([0.7]), mark_one_seed=True) == "0.700†"
    assert math.isnan(mean_ci([]).mean)
    assert format_mean_ci(mean_ci([1.0, math.nan])) == "nan ± nan"
    assert format_mean_ci(mean_ci([1.0, math.inf])) == "inf ± nan"


# ---------------------------------------------------------------------------------------------
# The full report
# ---------------------------------------------------------------------------------------------
def test_every_table_and_figure_is_written(full_run):
    run, paths = full_run
    tables = {
        "gdd_single_step",
        "gdd_single_step_unbiased",
        "self_gdd",
        "ablations",
        "ablations_unbiased",
        "multi_step",
        "multi_step_unbiased",
        "gdd_components",
        "factor_metrics",
    }
    figures = {
        "gdd_vs_size",
        "ablation_gdd_vs_size",
        "multi_step",
        "multi_step_components",
        "gdd_components",
        "factor_metrics",
        "training_curves",
        "ablation_training_curves",
    }
    assert set(paths.tables_md) == tables and set(paths.tables_tex) == tables
    assert set(paths.figures) == figures
    for path in paths.files():
        assert path.parent == run / "report" and path.stat().st_size > 0
    for path in paths.figures.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
    index = paths.index.read_text()
    for name in figures:
        assert f"({name}.png)" in index


def test_main_table_values_and_bold(full_run):
    _, paths = full_run
    md = paths.main_table
    assert md == paths.tables_md["gdd_single_step"].read_text()
    header = _row(md, "Model")
    col = header.index("N=20")
    gdm, grssm, eagwm = (_row(md, m, "SAR") for m in ("GDM", "G-RSSM", "EA-GWM"))
    assert gdm[col] == "2.000 ± 2.484"  # seeds [1, 2, 3], t_{0.975,2} = 4.303
    assert grssm[col] == "3.000 ± 2.484"
    expected = 0.6, T_975_2 * 0.1 / math.sqrt(3)  # seeds [0.5, 0.6, 0.7]: lowest mean
    assert eagwm[col] == f"**{expected[0]:.3f} ± {expected[1]:.3f}**"
    bold_in_col = [r[col] for r in (gdm, grssm, eagwm) if r[col].startswith("**")]
    assert len(bold_in_col) == 1
    # Ablations have their own table; RGC has no N=50 column entry.
    assert "no-h-plus" not in md
    assert _row(md, "GDM", "RGC")[header.index("N=50")] == "—"


def test_best_is_lowest_mean_everywhere(full_run):
    _, paths = full_run
    md = paths.tables_md["gdd_single_step"].read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| ") and "Model" not in ln]
    groups: dict[str, list[list[str]]] = {}
    env = None
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        env = cells[0] or env
        groups.setdefault(env, []).append(cells)
    for env, group in groups.items():
        for col in range(2, len(group[0]) - 1):  # the last column (Indist.) is no GDD
            means = {}
            for cells in group:
                m = re.match(r"\**([-\w.]+) ±", cells[col])
                if m and m.group(1) not in ("nan", "inf"):
                    means[cells[1]] = float(m.group(1))
            bold = {cells[1] for cells in group if cells[col].startswith("**")}
            if means:
                assert bold == {min(means, key=means.get)}, (env, col)


def test_nan_and_inf_are_visible(full_run):
    _, paths = full_run
    md = paths.main_table
    header = _row(md, "Model")
    assert _row(md, "G-RSSM", "OD")[header.index("N=30")] == "nan ± nan"
    assert _row(md, "EA-GWM", "OD")[header.index("N=50")] == "inf ± nan"
    tex = paths.tables_tex["gdd_single_step"].read_text()
    assert "nan $\\pm$ nan" in tex and "\\textbf{nan" not in tex


def test_latex_is_booktabs_and_bolds_best(full_run):
    _, paths = full_run
    tex = paths.tables_tex["gdd_single_step"].read_text()
    for token in ("\\begin{tabular}{llcccc}", "\\toprule", "\\midrule", "\\bottomrule"):
        assert token in tex
    assert "\\textbf{0.600 $\\pm$ 0.248}" in tex
    assert "2.000 $\\pm$ 2.484" in tex
    assert "Vanilla" not in tex


def test_self_ablation_multi_step_and_components_tables(full_run):
    _, paths = full_run
    self_md = paths.tables_md["self_gdd"].read_text()
    assert "**" not in self_md and "in bold" not in self_md
    # both estimators side by side: the biased one (the paper's) first, then the unbiased one
    assert _row(self_md, "RGC")[1:4] == ["biased (paper)", "0 ± 0", "0 ± 0"]
    sar = self_md.splitlines().index(next(ln for ln in self_md.splitlines() if "| SAR |" in ln))
    biased = [c.strip() for c in self_md.splitlines()[sar].strip("|").split("|")]
    unbiased = [c.strip() for c in self_md.splitlines()[sar + 1].strip("|").split("|")]
    assert biased[2] == f"2.00e-04 ± {T_975_2 * 1e-4 / math.sqrt(3):.2e}"
    assert unbiased[:3] == ["", "unbiased", f"0 ± {T_975_2 * 1e-5 / math.sqrt(3):.2e}"]
    assert "U-statistic" in self_md and "V-statistic" in self_md

    ab = paths.tables_md["ablations"].read_text()
    assert "N=30" not in ab  # ablations were evaluated at 20 and 50 only
    ref, abl = _row(ab, "GDM", "SAR"), _row(ab, "gdm:no-h-plus", "SAR")
    assert ref[2] == "2.000 ± 2.484"  # the full model, for reference
    # seeds 0.18 + 0.01 * seed: lower than gdm's mean, so bold
    assert abl[2] == f"**{0.15 * 1.2 + 0.01:.3f} ± {T_975_2 * 0.01 / math.sqrt(3):.3f}**"

    ms = paths.tables_md["multi_step"].read_text()
    header = _row(ms, "Model")
    gdm = _row(ms, "GDM", "SAR")
    assert gdm[header.index("T=3")] == f"**4.000 ± {T_975_2 / math.sqrt(3):.3f}**"  # 3h + seed
    assert gdm[1] == "50"

    comp = paths.tables_md["gdd_components"].read_text()
    row = _row(comp, "GDM", "SAR")
    assert row[1] == "20"  # the smallest size
    # GDD, then node (0.1 * seed), graph, edge, joint; equal components tie, and ties all bold
    assert row[3:] == [
        "2.000 ± 2.484",
        f"**0.100 ± {T_975_2 * 0.1 / math.sqrt(3):.3f}**",
        "**0.200 ± 0.000**",
        "**20.300 ± 0.000**",
        "**0.010 ± 0.000**",
    ]
    assert _row(comp, "G-RSSM", "OD")[4] == "nan ± nan"  # a NaN component of one seed
    fm = paths.tables_md["factor_metrics"].read_text()
    assert "opinion" in fm and "adjacency_bce" in fm


def test_unbiased_tables_beside_the_biased_ones_with_dashes_for_older_records(full_run):
    """Every model-evaluation table has its unbiased twin; a group with a record of an older
    run (no ``gdd_unbiased``) reads "—" there, never a mean over fewer seeds."""
    _, paths = full_run
    main = paths.tables_md["gdd_single_step_unbiased"].read_text()
    # the biased 2.000 - 0.5 per seed (bold: EA-GWM, lower in the biased table, reads "—")
    assert _row(main, "GDM", "SAR")[2] == "**1.500 ± 2.484**"
    assert "(eval" not in main  # the noise band is the biased GDD's bootstrap
    # EA-GWM's seed 2 lacks it at every size: its row stays, every cell a dash
    assert _row(main, "EA-GWM", "SAR")[2:] == ["—", "—", "—"]
    assert "U-statistic" in main
    biased = paths.tables_md["gdd_single_step"].read_text()
    assert "—" not in _row(biased, "EA-GWM", "SAR")  # the biased table has every seed
    assert "--" in paths.tables_tex["gdd_single_step_unbiased"].read_text()

    ab = paths.tables_md["ablations_unbiased"].read_text()
    assert _row(ab, "gdm:no-h-plus", "SAR")[2].startswith(f"**{0.15 * 1.2 + 0.01 - 0.5:.3f} ±")

    ms = paths.tables_md["multi_step_unbiased"].read_text()
    header = _row(ms, "Model")
    assert _row(ms, "GDM", "SAR")[header.index("T=3")].startswith("**3.500 ±")
    assert _row(ms, "G-RSSM", "SAR")[header.index("T=1") :] == ["—"] * 5


def test_rebuild_is_idempotent(full_run):
    run, paths = full_run
    before = {p: p.read_bytes() for p in paths.files()}
    again = build_report(run)
    assert again == paths
    assert {p: p.read_bytes() for p in again.files()} == before


def test_missing_kinds_are_skipped_and_stale_files_removed(tmp_path):
    run = make_run(tmp_path / "run", envs=("SAR",))
    build_report(run)
    assert (run / "report" / "multi_step.png").exists()
    for f in (run / "results").glob("ms-*.json"):
        f.unlink()
    for f in (run / "results").glob("self-*.json"):
        f.unlink()
    paths = build_report(run)
    assert "multi_step" not in paths.tables_md and "self_gdd" not in paths.tables_tex
    assert "multi_step" not in paths.figures
    assert not (run / "report" / "multi_step.png").exists()
    assert not (run / "report" / "self_gdd.md").exists()
    assert "gdd_single_step" in paths.tables_md


def test_only_training_logs(tmp_path):
    run = tmp_path / "run"
    _write_log(run, "SAR", "gdm", 0, ["kl"], 5)
    paths = build_report(run)
    assert paths.main_table == "" and not paths.tables_md
    assert set(paths.figures) == {"training_curves"}


def test_empty_or_missing_run_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing to report"):
        build_report(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results(tmp_path / "nope")


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------
def test_bad_json_names_the_file(tmp_path):
    _write(tmp_path, "ok", _single("SAR", "gdm", 20, 0))
    (tmp_path / "results" / "broken-job.json").write_text('{"kind": "single_step", ')
    with pytest.raises(ResultsFormatError, match=r"broken-job\.json.*not valid JSON"):
        build_report(tmp_path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("gdd"), r"lacks required key\(s\) \['gdd'\]"),
        (lambda r: r.update(kind="two_step"), "unknown or missing 'kind'"),
        (lambda r: r.update(size="20"), "'size' must be an integer"),
        (lambda r: r.update(gdd="0.1"), "'gdd' must be a number"),
        (lambda r: r["components"].pop("joint"), "lacks component 'joint'"),
        (lambda r: r["factor_metrics"].pop("features"), "'factor_metrics' needs"),
    ],
)
def test_malformed_record_names_the_file(tmp_path, change, message):
    record = _single("SAR", "gdm", 20, 0)
    change(record)
    _write(tmp_path, "bad-job", record)
    with pytest.raises(ResultsFormatError, match=message) as err:
        load_results(tmp_path)
    assert "bad-job.json" in str(err.value)


def test_multi_step_length_mismatch(tmp_path):
    record = _multi("SAR", "gdm", 0)
    record["invalid_rate_env"] = [0.1, 0.2]
    _write(tmp_path, "ms-bad", record)
    with pytest.raises(ResultsFormatError, match=r"ms-bad\.json.*invalid_rate_env.*2 entries"):
        load_results(tmp_path)


def test_duplicate_seed_is_rejected(tmp_path):
    _write(tmp_path, "a", _single("SAR", "gdm", 20, 0))
    _write(tmp_path, "b", _single("SAR", "gdm", 20, 0))
    with pytest.raises(ResultsFormatError, match=r"b\.json: duplicates .*a\.json"):
        load_results(tmp_path)


def test_null_reads_as_nan_and_extra_keys_are_dropped(tmp_path):
    record = _single("SAR", "gdm", 20, 0)
    record["gdd"] = None
    _write(tmp_path, "x", record)
    (loaded,) = load_results(tmp_path)
    assert math.isnan(loaded["gdd"]) and "some_future_key" not in loaded


def test_bad_log_header_names_the_file(tmp_path):
    folder = tmp_path / "train" / "SAR" / "gdm" / "seed0"
    folder.mkdir(parents=True)
    (folder / "log.csv").write_text("epoch,loss\n1,2\n")
    with pytest.raises(ResultsFormatError, match=r"seed0/log\.csv: header"):
        load_training_logs(tmp_path)


# ---------------------------------------------------------------------------------------------
# Training curves
# ---------------------------------------------------------------------------------------------
def test_training_logs_and_curves(tmp_path):
    _write_log(tmp_path, "SAR", "gdm:no-h-plus", 3, ["kl", "adj"], 4)
    (log,) = load_training_logs(tmp_path)
    assert (log.env, log.model, log.seed) == ("SAR", "gdm:no-h-plus", 3)
    np.testing.assert_array_equal(log.step, [0, 10, 20, 30])
    np.testing.assert_allclose(log.total, [13.0, 8.0, 10 / 3 + 3, 5.5])

    np.testing.assert_allclose(
        smooth(np.arange(1.0, 13.0)), [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6.5, 7.5]
    )
    np.testing.assert_allclose(smooth(np.array([1.0, np.nan, 3.0]), window=2), [1.0, 1.0, 3.0])

    short = type(log)("SAR", "gdm", 0, np.array([0, 10]), np.array([1.0, 3.0]), Path("a"))
    long = type(log)("SAR", "gdm", 1, np.array([0, 10, 20]), np.array([3.0, 5.0, 7.0]), Path("b"))
    steps, mean = mean_curve([short, long])
    np.testing.assert_array_equal(steps, [0, 10, 20])
    np.testing.assert_allclose(mean, [2.0, 4.0, 7.0])


def test_indistinguishability_column(full_run):
    _, paths = full_run
    md = paths.tables_md["gdd_single_step"].read_text()
    header = _row(md, "Model")
    assert header[-1] == "Indist."
    gdm, grssm = _row(md, "GDM", "SAR"), _row(md, "G-RSSM", "SAR")
    # per seed the share over all sizes (equal weights here), then mean ± CI over seeds
    assert gdm[-1] == f"0.200 ± {T_975_2 * 0.1 / math.sqrt(3):.3f}"
    assert grssm[-1] == "0.000 ± 0.000"
    assert "**" not in gdm[-1]  # higher is better: the lowest-mean bold does not apply
    assert "permutation test (200 relabelings" in md and "alpha = 0.05" in md
    assert "Indist." in paths.tables_tex["gdd_single_step"].read_text()


def test_one_seed_tables_show_no_interval(tmp_path):
    _write(tmp_path, "one", _single("SAR", "gdm", 20, 0))
    _write(tmp_path, "two", _single("SAR", "g-rssm", 20, 0))
    paths = build_report(tmp_path)
    md, tex = paths.tables_md["gdd_single_step"].read_text(), paths.tables_tex["gdd_single_step"]
    # plain values and one note, not "± –†" in every cell
    assert "±" not in md and "95% CI" not in md and "†" not in md
    assert _row(md, "GDM")[2] == "**1.000**"
    assert md.count("Values of one seed: no confidence interval") == 1
    assert "$\\pm$" not in tex.read_text() and "dagger" not in tex.read_text()
    assert "\\textbf{1.000}" in tex.read_text()


def test_one_seed_cells_beside_intervals_carry_a_dagger(tmp_path):
    for seed in range(2):
        _write(tmp_path, f"gdm{seed}", _single("SAR", "gdm", 20, seed))
    _write(tmp_path, "grssm", _single("SAR", "g-rssm", 20, 0))
    paths = build_report(tmp_path)
    md, tex = paths.tables_md["gdd_single_step"].read_text(), paths.tables_tex["gdd_single_step"]
    assert _row(md, "G-RSSM")[2] == "2.000†"
    t_975_1 = 12.706204736174707  # t_{0.975, 1}: seeds 1.0 and 2.0, std 0.707
    assert _row(md, "GDM")[2] == f"**1.500 ± {t_975_1 * math.sqrt(0.5) / math.sqrt(2):.3f}**"
    assert md.count("† one seed: no confidence interval") == 1
    assert "2.000$^\\dagger$" in tex.read_text() and "% † one seed" in tex.read_text()


def test_every_gdd_has_three_decimals_and_tiny_self_gdd_tables_are_scientific(tmp_path):
    from graphwm.report.tables import self_gdd_table

    def table(values):
        records = [
            {"kind": "self_gdd", "env": "SAR", "size": 20, "seed": i, "gdd": v}
            for i, v in enumerate(values)
        ]
        table = self_gdd_table(records)
        assert table is not None
        return table

    assert not table([0.05, 0.06]).scientific  # three decimals, as every GDD
    assert not table([2e-9]).scientific  # rounding noise of 0 reads 0.000
    tiny = table([1e-4, 2e-4])
    assert tiny.scientific and "Scientific notation" in " ".join(tiny.notes)


def test_factor_metric_names_follow_the_feature_types():
    from graphwm.envs import env_schema
    from graphwm.metric.factor_metrics import metric_name

    sar = env_schema("SAR")
    assert metric_name("adjacency_bce", sar) == "BCE"
    assert metric_name("stability", sar) == "W1"  # node continuous
    assert metric_name("k", sar) == "W1"  # graph continuous
    assert metric_name("reward", sar) == "W1"
    assert metric_name("exit_node", sar) == "TV"  # node categorical
    assert metric_name("escorting", sar) == "TV"  # graph categorical
    assert metric_name("action_mask", sar) == "TV" and metric_name("continuation", sar) == "TV"


def test_factor_figure_wraps_each_env_onto_rows_of_at_most_five_panels(tmp_path):
    from graphwm.report.figures import FACTOR_COLUMNS, factor_metrics_figure

    features = {f"f{i}": 0.1 * i for i in range(7)}  # 8 factors with the adjacency BCE
    records = [
        {
            "env": "OD",
            "model": m,
            "size": n,
            "factor_metrics": {"adjacency_bce": 0.5, "features": features},
        }
        for m in ("gdm", "g-rssm")
        for n in (10, 20)
    ]
    from graphwm.report.figures import model_styles

    path = factor_metrics_figure(records, tmp_path / "f.png", model_styles(["gdm", "g-rssm"]))
    import matplotlib.image

    height, width = matplotlib.image.imread(path).shape[:2]
    # two rows of five panels (height/width ~ 0.34 plus the legend), not one row of eight
    assert FACTOR_COLUMNS == 5 and height / width > 0.25
