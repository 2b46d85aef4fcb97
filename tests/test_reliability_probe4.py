"""Issue 47, section 3: the rest of the fourth probe. Each input used to crash deep inside
(a ``TypeError`` from a dict merge, torch's overflow, the allocator, an accepted bad key, a
misleading Ray message); each is now refused by name before any work."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import ray.exceptions
from gdm_models import OBS_KEYS, CheckpointError, load_checkpoint, make_model, save_checkpoint
from gdm_models.registry import memory_bytes
from gdm_models.synthetic import SYNTHETIC_SCHEMA, TINY_GDM_CONFIG, random_episode
from gdm_models.training.checkpoint import _manifest_digest
from graphwm_envs.wrappers import ActionMasksObservation

from graphwm.store import executors
from graphwm.store.versions import CodeMismatchError, code_digest


# ------------------------------------------------------------------ forged checkpoint manifest
@pytest.fixture
def checkpoint(tmp_path):
    model = make_model("vanilla-gwm", SYNTHETIC_SCHEMA, None, hidden_dim=4)
    return save_checkpoint(model, tmp_path / "ck")


def _forge(path, **fields):
    """Rewrite the manifest with ``fields`` and a recomputed digest (a deliberate forgery)."""
    mf = path / "checkpoint.json"
    manifest = {**json.loads(mf.read_text()), **fields}
    manifest["digest"] = _manifest_digest(manifest)
    mf.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"files": ["trainer_state.pt"]}, r"'files' must be a JSON object .* got list"),
        ({"files": {"../../x": "0" * 64}}, r"'files' names '../../x', not a plain"),
        ({"files": {"extra": 5}}, r"'files'\['extra'\] must be a SHA-256 string, got int"),
        ({"weights_sha256": ["a"]}, r"'weights_sha256' must be a SHA-256 string, got list"),
        ({"model_name": 3}, r"'model_name' must be a string, got int"),
        ({"schema": []}, r"'schema' must be a JSON object, got list"),
    ],
    ids=["files-list", "files-path", "files-digest", "weights-list", "name-int", "schema-list"],
)
def test_a_forged_manifest_field_is_a_checkpoint_error_naming_file_and_field(
    checkpoint, fields, problem
):
    _forge(checkpoint, **fields)
    with pytest.raises(CheckpointError, match=problem) as info:
        load_checkpoint(checkpoint)
    assert str(checkpoint / "checkpoint.json") in str(info.value)


# ------------------------------------------------------------------ cardinality in make_model
@pytest.mark.parametrize("card", [2**70, 2**63])
def test_a_cardinality_no_int64_code_reaches_is_refused_by_make_model(card):
    schema = {**SYNTHETIC_SCHEMA, "node_categorical": {"kind": card}}
    with pytest.raises(ValueError, match=r"\['kind'\]: cardinality .* exceeds"):
        make_model("gdm", schema, None, **TINY_GDM_CONFIG)


def test_a_cardinality_too_large_for_memory_is_named_before_torch_sees_it():
    card = memory_bytes()  # 4 bytes a category: twice this machine's memory
    schema = {**SYNTHETIC_SCHEMA, "node_categorical": {"kind": card}}
    with pytest.raises(ValueError, match=r"categorical feature 'kind' has .* categories"):
        make_model("vanilla-gwm", schema, None, hidden_dim=4)


# -------------------------------------------------------------------- imagine's num_samples
def test_imagine_refuses_a_num_samples_beyond_memory_by_name():
    model = make_model("vanilla-gwm", SYNTHETIC_SCHEMA, None, hidden_dim=4)
    ep = random_episode(5, 5, np.random.default_rng(0))
    latent = model.observe({k: ep[k][:1] for k in OBS_KEYS}, None)
    action = np.zeros(5, np.int8)
    action[0] = 1
    with pytest.raises(ValueError, match=r"num_samples=1,099,511,627,776 .* draw fewer"):
        model.imagine(latent, action, num_samples=2**40, generator=0)
    out = model.imagine(latent, action, num_samples=3, generator=0)  # a sane size still works
    assert out["adjacency"].shape == (3, 5, 5)


# ------------------------------------------------------------------ ActionMasksObservation
@pytest.mark.parametrize("key", ["", 5, None, b"mask"])
def test_action_masks_observation_refuses_a_key_that_is_no_name(key):
    env = gym.make("graphenv/SAR-v0", num_nodes=6)
    with pytest.raises(ValueError, match="key must be a non-empty string"):
        ActionMasksObservation(env, key=key)


# ------------------------------------------------------------------------ Ray's refusals
class _Ref:
    def __init__(self, answer):
        self.answer = answer


class _Cluster:
    """The part of ``ray``'s API that :func:`check_nodes` uses, over given probe answers
    (an exception object: the probe's ``ray.get`` raises it)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self._next = iter(self.answers)  # one probe task per node, in node order

    def nodes(self):
        return [
            {"Alive": True, "Resources": {"CPU": 1}, "NodeID": f"{k:02x}" * 28,
             "NodeManagerAddress": f"10.0.0.{k}"}
            for k in range(len(self.answers))
        ]  # fmt: skip

    def remote(self, **_):
        answers = self._next

        def wrap(_fn):
            class Task:
                @staticmethod
                def remote():
                    return _Ref(next(answers))

            return Task

        return wrap

    def wait(self, refs, num_returns, timeout):
        done = [r for r in refs if r.answer is not None]
        return done, [r for r in refs if r.answer is None]

    def get(self, ref):
        if isinstance(ref.answer, BaseException):
            raise ref.answer
        return ref.answer


def test_a_dead_raylet_is_named_not_taken_for_missing_dependencies():
    dead = ray.exceptions.LocalRayletDiedError()
    cluster = _Cluster([code_digest(), dead])
    with pytest.raises(CodeMismatchError) as info:
        executors.check_nodes(cluster)
    message = str(info.value)
    assert f"10.0.0.1 (node id {'01' * 28})" in message and "raylet" in message
    assert "install graphwm's dependencies" not in message


def test_a_node_that_does_not_answer_is_named_with_its_id():
    with pytest.raises(CodeMismatchError, match=r"10\.0\.0\.0 \(node id 0000.*did not answer"):
        executors.check_nodes(_Cluster([None]))


def test_a_stale_checkout_is_named_by_address_and_node_id():
    with pytest.raises(CodeMismatchError, match=r"10\.0\.0\.1 \(node id (01){28}\) runs"):
        executors.check_nodes(_Cluster([code_digest(), "0" * 16]))


def test_a_missing_dependency_still_says_to_install_it():
    err = ray.exceptions.RayTaskError("probe", "tb", ModuleNotFoundError("No module named 'x'"))
    with pytest.raises(CodeMismatchError, match="install graphwm's dependencies"):
        executors.check_nodes(_Cluster([err]))
