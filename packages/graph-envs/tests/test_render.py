"""Renders show what they should: checked on the pixels, not only on the shapes."""

from __future__ import annotations

import graphwm_envs  # noqa: F401
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.animation import animate_episode, record_episode, save_gif
from graphwm_envs.core import render
from graphwm_envs.heuristics import greedy_action, random_action
from graphwm_envs.sar import viewer as sar_viewer
from graphwm_envs.sar.dynamics import visible_nodes
from matplotlib.colors import to_rgb
from PIL import Image


def make(name: str, num_nodes: int = 20, **kwargs):
    env = gym.make(f"graphenv/{name}-v0", num_nodes=num_nodes, render_mode="rgb_array", **kwargs)
    return env.unwrapped


def pixels(image: np.ndarray, colour: str) -> int:
    """Number of pixels of exactly ``colour`` (interiors of markers and thick lines)."""
    rgb = np.round(np.array(to_rgb(colour)) * 255).astype(np.uint8)
    return int(np.all(image == rgb, axis=-1).sum())


@pytest.mark.parametrize("name", ["RGC", "OD", "SAR", "CF"])
def test_render_returns_an_rgb_frame(name):
    env = make(name, num_nodes=12)
    with pytest.raises(RuntimeError, match="reset"):
        env.render()
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.shape == (480, 640, 3)
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 10  # not a blank canvas
    with pytest.warns(UserWarning, match="render_mode"):
        assert gym.make(f"graphenv/{name}-v0", num_nodes=12).unwrapped.render() is None


def sar_with_one_far_survivor():
    """A SAR env whose only survivor sits beyond the agent's two-hop view."""
    env = make("SAR", num_nodes=40)
    for seed in range(50):
        env.reset(seed=seed)
        far = np.flatnonzero(env.state.survivors & ~visible_nodes(env.state))
        if far.size:
            env.state.survivors[:] = False
            env.state.survivors[far[0]] = True
            return env, int(far[0])
    raise AssertionError("no seed with a survivor out of view")


def test_sar_draws_an_unseen_survivor_as_unknown_not_as_a_survivor():
    env, far = sar_with_one_far_survivor()
    survivor = sar_viewer.CATEGORIES[sar_viewer.SURVIVOR][1]
    unknown = sar_viewer.CATEGORIES[sar_viewer.UNKNOWN][1]
    assert sar_viewer.node_codes(env)[far] == sar_viewer.UNKNOWN
    hidden = env.render()
    env.state.survivors[far] = False
    none = env.render()
    # the unseen survivor adds no survivor-coloured pixel (the legend's marker is in both)
    assert pixels(hidden, survivor) == pixels(none, survivor)
    assert pixels(hidden, unknown) == pixels(none, unknown) > 0
    # the same survivor within view is drawn in the survivor colour
    near = int(np.flatnonzero(env.state.adjacency[env.state.location])[0])
    env.state.survivors[near] = True
    assert pixels(env.render(), survivor) > pixels(none, survivor) + 20


def test_cf_colour_scale_is_fixed_for_the_episode():
    env = make("CF", num_nodes=30)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    frames, styles = [env.render()], [render.viewer_of(env).node_style(env)]
    for _ in range(4):
        env.step(greedy_action(env, rng))
        frames.append(env.render())
        styles.append(render.viewer_of(env).node_style(env))
    assert {(s.vmin, s.vmax) for s in styles} == {(0.0, 2.0)}
    # the colour bar (and its tick labels) is pixel-identical in every frame
    bar = (slice(int(480 * 0.55), int(480 * 0.96)), slice(int(640 * 0.73), 640))
    for frame in frames[1:]:
        np.testing.assert_array_equal(frame[bar], frames[0][bar])
    # while the loads themselves changed, so an auto-scaled bar would have moved
    first, last = styles[0].values, styles[-1].values
    assert not np.allclose(first.max(), last.max())


def test_rgc_marks_edges_added_this_step_and_earlier():
    env = make("RGC", num_nodes=12)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    start = env.render()
    env.step(greedy_action(env, rng))
    one = env.render()
    assert pixels(one, render.ADDED_COLOUR) > pixels(start, render.ADDED_COLOUR) + 30
    env.step(greedy_action(env, rng))
    two = env.render()
    assert pixels(two, render.EARLIER_COLOUR) > pixels(start, render.EARLIER_COLOUR) + 30
    assert pixels(two, render.SELECTED_COLOUR) > pixels(start, render.SELECTED_COLOUR) + 30
    # restoring a snapshot starts a new trace: nothing is marked as added by a step
    env.restore_state(env.clone_state())
    assert pixels(env.render(), render.ADDED_COLOUR) == pixels(start, render.ADDED_COLOUR)


def test_cf_marks_the_removed_edges():
    env = make("CF", num_nodes=20)
    env.reset(seed=0)
    before = env.render()
    env.step(greedy_action(env, np.random.default_rng(0)))  # cuts every edge of a hub
    after = env.render()
    assert pixels(after, render.REMOVED_COLOUR) > pixels(before, render.REMOVED_COLOUR) + 30


def test_od_opinions_use_the_discrete_palette():
    env = make("OD", num_nodes=20)
    env.reset(seed=0)
    style = render.viewer_of(env).node_style(env)
    colours = [entry[1] for entry in style.categories]
    assert len(colours) == len(set(colours)) == env.params.num_opinions
    np.testing.assert_array_equal(style.values, env.state.opinion)
    frame = env.render()
    env.state.opinion[:] = 0
    all_target = env.render()
    for opinion in range(1, 5):  # the legend marker stays; the nodes' colour goes
        if np.any(style.values == opinion):
            assert pixels(frame, colours[opinion]) > pixels(all_target, colours[opinion]) + 20
    assert pixels(all_target, colours[0]) > pixels(frame, colours[0])


def test_title_holds_step_reward_return_and_outcome():
    env = make("SAR", num_nodes=12)
    env.reset(seed=0)
    assert render.frame_title(env).startswith("SAR   step 0/")
    assert "reward -" in render.frame_title(env) and "\nrunning" in render.frame_title(env)
    rng = np.random.default_rng(0)
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(random_action(env, rng))
        total += reward
        done = terminated or truncated
    title = render.frame_title(env)
    assert f"step {env.elapsed_steps}/" in title
    assert f"reward {reward:+.3g}" in title and f"return {total:+.3g}" in title
    expected = "terminated: " + info["outcome"].replace("_", " ") if terminated else "truncated"
    assert title.splitlines()[1].startswith(expected)


def test_gif_has_one_frame_per_state(tmp_path):
    env = gym.make("graphenv/CF-v0", num_nodes=12, render_mode="rgb_array")
    frames = animate_episode(env, random_action, tmp_path / "cf.gif", seed=3)
    steps = env.unwrapped.elapsed_steps
    assert steps >= 2 and len(frames) == steps + 1
    with Image.open(tmp_path / "cf.gif") as gif:
        assert gif.n_frames == steps + 1
        assert gif.size == (640, 480)
    assert len(record_episode(env, random_action, seed=3, max_steps=1)) == 2


def test_animation_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="render_mode"):
        record_episode(gym.make("graphenv/OD-v0"), random_action)
    with pytest.raises(ValueError, match="at least one frame"):
        save_gif([], tmp_path / "x.gif")
    with pytest.raises(ValueError, match="same shape"):
        save_gif([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)], tmp_path / "y")


def test_title_says_why_cf_and_rgc_episodes_ended():
    for name, reasons in (
        ("CF", ("no edges left", "horizon reached")),
        ("RGC", ("budget spent", "step limit")),
    ):
        env = make(name, num_nodes=10)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(greedy_action(env, rng))
            done = terminated or truncated
        line = render.frame_title(env).splitlines()[1]
        assert any(line.startswith(f"terminated: {r}") for r in reasons), line
    assert line.startswith("terminated: budget spent")  # RGC's greedy always adds an edge
