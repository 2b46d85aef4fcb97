"""`graphwm demo` renders every episode it runs, for every env."""

from __future__ import annotations

import graphwm_envs
import numpy as np
from PIL import Image

from graphwm.demo import run_demo, run_episode, short_name


def test_demo_renders_every_seed_of_every_env(tmp_path, capsys):
    stats = run_demo(tmp_path, seeds=2, num_nodes=6, gif=False)
    assert [(s.env_id, s.seed) for s in stats] == [
        (env_id, seed) for env_id in graphwm_envs.ENV_IDS for seed in range(2)
    ]
    for s in stats:
        stem = f"{short_name(s.env_id)}_seed{s.seed}"
        start = np.asarray(Image.open(tmp_path / f"{stem}_start.png"))
        end = np.asarray(Image.open(tmp_path / f"{stem}_end.png"))
        assert start.shape[:2] == end.shape[:2] == (480, 640)
        assert not np.array_equal(start, end)  # the title's step differs at least
    assert not list(tmp_path.glob("*.gif"))
    assert "start/end PNGs of every episode" in capsys.readouterr().out


def test_demo_gif_has_a_frame_per_state(tmp_path):
    stats = run_episode("graphenv/CF-v0", seed=1, num_nodes=10, out_dir=tmp_path, gif=True)
    with Image.open(tmp_path / "CF_seed1.gif") as gif:
        assert gif.n_frames == stats.length + 1


def test_cli_demo_gif_flag_reaches_run_demo(tmp_path, monkeypatch):
    import graphwm.demo
    from graphwm.cli import main

    calls = []
    monkeypatch.setattr(graphwm.demo, "run_demo", lambda out, **kw: calls.append(kw))
    main(["demo", "--out", str(tmp_path), "--seeds", "1", "--gif"])
    main(["demo", "--out", str(tmp_path), "--seeds", "1"])
    assert [c["gif"] for c in calls] == [True, False]
