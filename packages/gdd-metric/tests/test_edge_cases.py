"""Edge cases of the inputs get clear errors (issue 13 item 5) and both weight spellings work."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gdd_metric import MIN_BANDWIDTH, Bandwidths, gdd, validate_samples

SCHEMA = {"node_continuous": ["x"], "node_categorical": {"c": 2}}


def _samples(codes: np.ndarray) -> dict:
    s, n = codes.shape[:2]
    return {
        "adjacency": np.zeros((s, n, n), dtype=np.int8),
        "node_continuous": np.zeros((s, n, 1)),
        "node_categorical": codes,
    }


@pytest.mark.parametrize("sigma", [1e-300, 5e-324, 1e-9])
def test_tiny_sigma_is_refused_with_name_value_and_range(sigma):
    with pytest.raises(ValueError) as err:
        Bandwidths(sigma={"x": sigma})
    msg = str(err.value)
    assert "sigma['x']" in msg and repr(sigma) in msg and "[1e-08, inf)" in msg


def test_tiny_sigma_in_dict_form_is_refused_before_any_arithmetic():
    x = _samples(np.zeros((2, 3, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="below the minimum"):
        gdd(x, x, SCHEMA, {"sigma": {"x": 1e-300}, "lambda": {"c": 1.0}})


def test_minimum_bandwidth_itself_is_valid_and_finite():
    rng = np.random.default_rng(0)
    x = _samples(rng.integers(0, 2, (3, 4, 1)))
    y = _samples(rng.integers(0, 2, (3, 4, 1)))
    y["node_continuous"] = y["node_continuous"] + 1.0
    res = gdd(x, y, SCHEMA, Bandwidths(sigma={"x": MIN_BANDWIDTH}, lam={"c": 1.0}))
    assert np.isfinite(res.gdd) and res.node > 0


@pytest.mark.parametrize("dtype", [np.uint64, np.uint32, np.uint8])
def test_unsigned_codes_out_of_range_quote_the_real_value(dtype):
    big = np.iinfo(dtype).max
    codes = np.zeros((1, 3, 1), dtype=dtype)
    codes[0, 2, 0] = big
    with pytest.raises(ValueError) as err:
        validate_samples(_samples(codes), SCHEMA, "pred")
    msg = str(err.value)
    assert str(int(big)) in msg and "valid: 0..1" in msg
    assert "-9223372036854775808" not in msg


def test_unsigned_codes_in_range_are_accepted():
    codes = np.array([[[0], [1], [1]]], dtype=np.uint64)
    v = validate_samples(_samples(codes), SCHEMA)
    assert v.node_categorical.dtype == np.int64
    np.testing.assert_array_equal(v.node_categorical[0, :, 0], [0, 1, 1])


@pytest.mark.parametrize("text", ["[1,2]", "  [ ]", '[{"sigma": {}}]'])
def test_from_json_array_says_what_json_it_wants(text):
    with pytest.raises(ValueError, match=r"JSON list.*JSON object \{\"sigma\""):
        Bandwidths.from_json(text)


def test_from_json_bad_text_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="not valid JSON"):
        Bandwidths.from_json('{"sigma": ')
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="JSON text itself"):
        Bandwidths.from_json(missing)
    with pytest.raises(FileNotFoundError, match="JSON text itself"):
        Bandwidths.from_json("bandwidths.jsn")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        Bandwidths.from_json(tmp_path / "list.json")


def test_lambda_and_lam_are_both_accepted():
    want = Bandwidths(sigma={"x": 0.5}, lam={"c": 2.0})
    assert Bandwidths(sigma={"x": 0.5}, **{"lambda": {"c": 2.0}}) == want
    assert Bandwidths.from_dict({"sigma": {"x": 0.5}, "lam": {"c": 2.0}}) == want
    assert Bandwidths.from_dict({"sigma": {"x": 0.5}, "lambda": {"c": 2.0}}) == want
    assert Bandwidths.from_json(json.dumps({"sigma": {"x": 0.5}, "lam": {"c": 2.0}})) == want
    # the written form keeps the paper's name
    assert json.loads(want.to_json())["lambda"] == {"c": 2.0}
    x = _samples(np.zeros((2, 3, 1), dtype=np.int64))
    assert gdd(x, x, SCHEMA, {"sigma": {"x": 0.5}, "lam": {"c": 2.0}}).gdd == 0.0


def test_both_spellings_at_once_or_unknown_arguments_are_refused():
    with pytest.raises(ValueError, match="both 'lambda' and 'lam'"):
        Bandwidths.from_dict({"lambda": {"c": 1.0}, "lam": {"c": 2.0}})
    with pytest.raises(TypeError, match="once"):
        Bandwidths(lam={"c": 1.0}, **{"lambda": {"c": 2.0}})
    with pytest.raises(TypeError, match="expected sigma= and lam="):
        Bandwidths(sigmas={"x": 1.0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown keys.*expected"):
        Bandwidths.from_dict({"sigma": {}, "lamda": {}})


def test_fit_warnings_point_at_the_caller():
    """A feature with no observed values warns, and the warning names the caller's line."""
    from gdd_metric import fit_bandwidths

    empty = {"adjacency": np.zeros((0, 0)), "node_categorical": np.zeros((0, 1), np.int64)}
    with pytest.warns(UserWarning, match="no transitions with entries for 'c'") as record:
        bw = fit_bandwidths([(empty, empty)], {"node_categorical": {"c": 2}})
    assert bw.lam == {"c": 1.0}
    assert record[0].filename == __file__
