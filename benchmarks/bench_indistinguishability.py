"""Cost of the indistinguishability column: permutation test vs the GDD of one transition.

For each env and size of the smoke preset it draws two sample sets of one reference transition
(kappa = 30 environment samples each, the smoke preset's setting), then times the transition
GDD (what every single-step job computes anyway) and the permutation test with 200 relabelings
(what ``evaluate.permutations = 200`` adds), in the same run, and prints the best of
``--repeats`` timings and their ratio. The smoke preset scores 792 single-step transitions.

    uv run python benchmarks/bench_indistinguishability.py
    uv run python benchmarks/bench_indistinguishability.py --permutations 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

from graphwm.envs import env_schema
from graphwm.metric.graph import extend_schema, stack_graphs
from graphwm.metric.protocol import (
    STREAM_ENV,
    STREAM_SELF,
    env_samples,
    replay_episode,
    sample_seeds,
    transition_gdd,
    transition_p_value,
)
from graphwm.stages.collect import record_episode
from graphwm.stages.fit import bandwidth_transitions


def _sets(env: str, n: int, kappa: int):
    episode = record_episode(env, n, seed=7)
    t = min(3, len(episode["reward"]) - 1)
    replay = replay_episode(env, n, 7, episode["actions"], [t], check=episode)
    action = episode["actions"][t : t + 1]
    a, _ = env_samples(env, n, replay.snapshots[t], action, sample_seeds(7, t, STREAM_ENV, kappa))
    b, _ = env_samples(env, n, replay.snapshots[t], action, sample_seeds(7, t, STREAM_SELF, kappa))
    return stack_graphs(a[0]), stack_graphs(b[0])


def _best(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls, in seconds (the garbage collector left on)."""
    return min(timeit.repeat(fn, setup="gc.enable()", repeat=repeats, number=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--kappa", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    from gdd_metric import fit_bandwidths

    print(f"| env | N | GDD ms | test ms ({args.permutations} relabelings) | ratio |")
    print("|---|--:|--:|--:|--:|")
    for env in ("RGC", "OD", "SAR", "CF"):
        schema = env_schema(env)
        episodes = [record_episode(env, 10, seed=s) for s in range(3)]
        pairs = bandwidth_transitions(episodes, 8, np.random.default_rng(0))
        bandwidths = fit_bandwidths(pairs, extend_schema(schema))
        for n in (10, 20, 40):
            x, y = _sets(env, n, args.kappa)
            common = (x, y, schema, bandwidths, False)
            gdd_s = _best(lambda c=common: transition_gdd(*c), args.repeats)
            test_s = _best(
                lambda c=common: transition_p_value(*c, args.permutations, seed=0), args.repeats
            )
            print(
                f"| {env} | {n} | {1e3 * gdd_s:.2f} | {1e3 * test_s:.2f} | {test_s / gdd_s:.2f} |"
            )


if __name__ == "__main__":
    main()
