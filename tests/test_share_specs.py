"""Asking for part of one GPU: what a request may say, and the share a pool
that shares its GPUs gives it (share_specs)."""
from fractions import Fraction

import pytest

from gpuspawner.vocab.shares import (PoolSharing, ShareRequest, parse_share,
                                            parse_sharing, resolve_share, share_label)
from gpuspawner.vocab.specs import SpecError, parse_job, parse_server

H200 = PoolSharing("h200", 4, 143771)  # 140.4 GiB, as NVML reports an H200
GIB = 1024


@pytest.mark.parametrize("body, expected", [
    ({}, None),
    ({"gpu_share": "1/4"}, ShareRequest(Fraction(1, 4))),
    ({"gpu_share": " 3 / 8 "}, ShareRequest(Fraction(3, 8))),
    ({"gpu_share": 0.25}, ShareRequest(Fraction(1, 4))),
    ({"gpu_memory": "35GiB"}, ShareRequest(None, 35 * GIB)),
    ({"gpu_memory": "35G"}, ShareRequest(None, 35 * GIB)),
    ({"gpu_memory": "512MiB"}, ShareRequest(None, 512)),
    ({"gpu_memory": 20}, ShareRequest(None, 20 * GIB)),
    ({"gpu_memory": "1.5gib", "gpu_share": "1/8"}, ShareRequest(Fraction(1, 8), 1536)),
    ({"gpu_share": "1/4", "gpus": 1}, ShareRequest(Fraction(1, 4))),
])
def test_what_a_request_may_ask_for(body, expected):
    assert parse_share(body) == expected


@pytest.mark.parametrize("body, field, words", [
    ({"gpu_share": "1/0"}, "gpu_share", "divides by zero"),
    ({"gpu_share": "half"}, "gpu_share", "such as '1/4'"),
    ({"gpu_share": True}, "gpu_share", "such as '1/4'"),
    ({"gpu_share": 1}, "gpu_share", "less than one GPU"),
    ({"gpu_share": "5/4"}, "gpu_share", "less than one GPU"),
    ({"gpu_share": 0}, "gpu_share", "more than 0"),
    ({"gpu_share": -0.5}, "gpu_share", "more than 0"),
    ({"gpu_share": float("nan")}, "gpu_share", "such as '1/4'"),
    ({"gpu_memory": "lots"}, "gpu_memory", "such as '35GiB'"),
    ({"gpu_memory": "35TB"}, "gpu_memory", "such as '35GiB'"),
    ({"gpu_memory": 0}, "gpu_memory", "at least 1 MiB"),
    ({"gpu_memory": 5.9e307}, "gpu_memory", "more memory than any GPU has"),
    ({"gpu_memory": "9" * 400}, "gpu_memory", "more memory than any GPU has"),
    ({"gpu_share": "1/4", "gpus": 2}, "gpu_share", "share of one GPU"),
    ({"gpu_memory": "10G", "nodes": 2}, "gpu_memory", "share of one GPU"),
])
def test_a_request_that_cannot_be_a_share_names_its_field(body, field, words):
    with pytest.raises(SpecError) as e:
        parse_share(body)
    assert e.value.field == field and words in e.value.message


@pytest.mark.parametrize("request_, share", [
    (ShareRequest(Fraction(1, 4)), 0.25),
    (ShareRequest(Fraction(1, 8)), 0.25),        # rounded up to a whole slot
    (ShareRequest(Fraction(1, 2)), 0.5),
    (ShareRequest(None, 35 * GIB), 0.25),        # 35 GiB of 140.4 fits a quarter
    (ShareRequest(None, 36 * GIB), 0.5),         # a quarter holds 35.1 GiB
    (ShareRequest(Fraction(1, 4), 50 * GIB), 0.5),  # the larger of the two
    (ShareRequest(Fraction(3, 4)), 0.75),
])
def test_a_share_is_the_fewest_slots_that_hold_what_was_asked(request_, share):
    assert resolve_share(request_, "h200", H200) == share


@pytest.mark.parametrize("request_, sharing, field, words", [
    (ShareRequest(Fraction(1, 4)), None, "gpu_share", "does not share its GPUs"),
    (ShareRequest(None, 10 * GIB), None, "gpu_memory", "does not share its GPUs"),
    (ShareRequest(Fraction(7, 8)), H200, "gpu_share", "rounds up to a whole h200 GPU"),
    (ShareRequest(None, 110 * GIB), H200, "gpu_memory", "rounds up to a whole h200 GPU"),
    (ShareRequest(None, 200 * GIB), H200, "gpu_memory", "more than a whole h200 GPU has (140.4 GiB)"),
])
def test_a_share_a_pool_cannot_give_says_why(request_, sharing, field, words):
    with pytest.raises(SpecError) as e:
        resolve_share(request_, "h200", sharing)
    assert e.value.field == field and words in e.value.message


@pytest.mark.parametrize("config, expected", [
    ({}, {}),
    ({"h200": {"share_units": 4}}, {"h200": 4}),
    ({"h200": 8, "a100": {"share_units": 2}}, {"h200": 8, "a100": 2}),
])
def test_the_sharing_config(config, expected):
    assert parse_sharing(config) == expected


@pytest.mark.parametrize("config, words", [
    ({"h200": {"share_units": 3}}, "one of 2, 4, 8, 16"),
    ({"h200": {"share_units": True}}, "one of 2, 4, 8, 16"),
    ({"h200": {"slots": 4}}, "unknown key(s) slots"),
    ({"h200": 1}, "one of 2, 4, 8, 16"),
])
def test_a_wrong_sharing_config_names_the_pool(config, words):
    with pytest.raises(ValueError) as e:
        parse_sharing(config)
    assert "gpu_sharing['h200']" in str(e.value) and words in str(e.value)


def test_jobs_and_servers_carry_their_share_request():
    job = parse_job({"command": "python train.py", "pool": "h200", "gpu_memory": "35GiB"})
    server = parse_server({"kind": "notebook", "pool": "h200", "gpu_share": "1/4"})
    assert job.share == ShareRequest(None, 35 * GIB) and job.gpus_per_node == 1
    assert server.share == ShareRequest(Fraction(1, 4))
    assert parse_job({"command": "x", "pool": "h200"}).share is None


@pytest.mark.parametrize("share, memory, model, label", [
    (0.25, 143771, "H200", "1/4 H200 · 35.1 GiB"),
    (0.5, 0, "", "1/2"),
    (0.375, 81920, "A100", "3/8 A100 · 30.0 GiB"),
])
def test_how_people_see_a_share(share, memory, model, label):
    assert share_label(share, memory, model) == label
