"""The spawn form's choices and the checks of user_options: pure tables."""
from __future__ import annotations

import re
from fractions import Fraction

import pytest

from gpuspawner.spawner.options import (OptionsError, offers, parse_options, preselect,
                                       render_form)


def pool(name="a100", free=6, teams=None, nodes=(4, 4), model="NVIDIA A100", mib=81920):
    return {"name": name, "free": free, "teams": teams or {},
            "nodes": [{"name": f"n{i}", "gpus": g,
                       "devices": [{"model": model, "memory_mib": mib, "healthy": True}] * g}
                      for i, g in enumerate(nodes)]}


def team(name="vision", nominal=2, borrowing=2, limit=None):
    t = {"name": name, "quotas": {"a100": {"nominal": nominal, "borrowing_limit": borrowing}}}
    if limit is not None:
        t["notebook_gpu_limits"] = {"a100": limit}
    return t


@pytest.mark.parametrize("pools, teams, options, expect", [
    ([pool()], [team()], {"pool": "a100", "gpus": 2}, ("vision", "a100", 2)),
    ([pool()], [team()], {"gpu_choice": ["a100:1"], "team": ["vision"]}, ("vision", "a100", 1)),
    ([pool()], [team()], {"gpu_choice": [":0"]}, ("vision", "", 0)),
    ([pool()], [team()], {}, ("vision", "", 0)),
    ([pool()], [team(), team("nlp")], {"team": "nlp", "pool": "a100", "gpus": 1}, ("nlp", "a100", 1)),
    ([pool()], [team(borrowing=None)], {"pool": "a100", "gpus": 4}, ("vision", "a100", 4)),
])
def test_accepted(pools, teams, options, expect):
    r = parse_options(options, offers(pools, teams))
    assert (r.team, r.pool, r.gpus) == expect


@pytest.mark.parametrize("pools, teams, options, field, words", [
    ([pool()], [team()], {"pool": "a100", "gpus": 5}, "gpus", "at most 4 a100 GPUs"),
    ([pool()], [team(limit=1)], {"pool": "a100", "gpus": 2}, "gpus", "notebook server of team vision may hold at most 1"),
    ([pool(nodes=(2, 2))], [team(borrowing=None)], {"pool": "a100", "gpus": 3}, "gpus", "no a100 machine has more than 2"),
    ([pool()], [team()], {"pool": "h100", "gpus": 1}, "pool", "unknown pool 'h100'"),
    ([pool()], [team()], {"pool": "a100", "gpus": "two"}, "gpus", "whole number"),
    ([pool()], [team()], {"pool": "a100", "gpus": -1}, "gpus", "0 or more"),
    ([pool()], [team(), team("nlp")], {"pool": "a100", "gpus": 1}, "team", "choose which"),
    ([pool()], [team()], {"team": "nlp", "pool": "a100", "gpus": 1}, "team", "not in team 'nlp'"),
    ([pool()], [], {"pool": "a100", "gpus": 1}, "team", "in no team"),
    ([pool()], [team()], ["a100"], "user_options", "object"),
])
def test_refused_with_the_field_and_why(pools, teams, options, field, words):
    with pytest.raises(OptionsError) as e:
        parse_options(options, offers(pools, teams))
    assert e.value.field == field and words in e.value.message


BORROWS = "borrows idle GPUs of other teams, so it may be preempted"
UNOWNED = "more than the team's quota: uses idle GPUs that no team is guaranteed"


def lender(name="nlp", nominal=6, lending=None):
    return {"name": name, "quotas": {"a100": {"nominal": nominal, "borrowing_limit": 0,
                                              "lending_limit": lending}}}


@pytest.mark.parametrize("used, gpus, nominal, borrowing, others, says", [
    (0, 2, 2, 2, [lender()], None),
    (1, 2, 2, 2, [lender()], BORROWS),
    (2, 1, 2, 2, [lender()], BORROWS),
    (0, 3, 2, None, [lender()], BORROWS),
    (2, 1, 2, 0, [lender()], "the team's quota is in use: waits in the queue"),
    (3, 2, 2, 2, [lender()], "the team's quota is in use: waits in the queue"),
    # Another team that lends nothing here is no one to borrow from.
    (1, 2, 2, 2, [lender(lending=0)], "more than the team's 1 free a100 GPU and no other team's"),
    # No other team (or one with no GPUs here): past the quota are GPUs no
    # team guarantees (8 - 2 here) ...
    (1, 2, 2, 2, [], UNOWNED),
    (1, 2, 2, 2, [lender(nominal=0)], UNOWNED),
    # ... or, when the team guarantees the whole pool (the default team alone), a wait.
    (5, 4, 8, None, [], "more than the team's 3 free a100 GPUs and no other team's to borrow: "
                        "waits in the queue until they free up"),
    (0, 4, 8, None, [], None),
])
def test_choice_says_whether_it_borrows_or_waits(used, gpus, nominal, borrowing, others, says):
    mine = team(nominal=nominal, borrowing=borrowing)
    offer = offers([pool(teams={"vision": used})], [mine], [mine] + others)["vision"][0]
    note = offer.note(gpus)
    assert (says in note) if says else note == ""
    assert ("borrows" in note) == (says == BORROWS)


def test_form_lists_what_the_team_can_get():
    html = render_form(offers([pool()], [team(limit=3)]))
    assert 'value=":0">' in html and 'value="a100:1" checked>' in html
    assert [f'value="a100:{n}"' in html for n in (1, 2, 3, 4)] == [True, True, True, False]
    assert "NVIDIA A100 (80 GiB)" in html and 'name="team" value="vision"' in html


def test_form_is_a_card_per_choice_with_the_quota_said_once():
    html = render_form(offers([pool(teams={"vision": 1})], [team()], [team(), lender()]))
    assert html.count('class="card gpuhub-profile') == 2          # CPU only, pool a100
    assert html.count("free in its quota") == 1
    assert "1 of its 2 a100 GPUs free in its quota (may borrow 2), 6 idle in the pool" in html
    assert '<select class="form-select form-select-sm w-auto gpuhub-gpus"' in html
    assert '<option value="a100:2">2 GPUs — borrows idle GPUs' in html


def test_form_for_several_teams_asks_who_pays_and_escapes():
    html = render_form(offers([pool()], [team("<b>x</b>"), team("nlp")]))
    assert '<select id="gpuhub-team" name="team"' in html
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html


@pytest.mark.parametrize("pools, teams, says", [
    ([pool()], [], "You are in no team"),
    ([pool()], [team(nominal=0, borrowing=0)], "team vision has no quota in pool a100"),
    ([pool()], [team(limit=0)], "a notebook server of team vision may hold no a100 GPU"),
    ([pool(nodes=())], [team()], "pool a100 has no GPU in service"),
    ([pool()], [team(nominal=0, borrowing=0), team("nlp")], None),   # nlp has GPUs
    ([pool()], [team()], None),
])
@pytest.mark.parametrize("admin", [True, False])
def test_form_says_why_there_is_no_gpu_and_links_admins_to_the_fix(pools, teams, says, admin):
    url = "/services/gpuhub/admin/teams"
    html = render_form(offers(pools, teams), admin_fix_url=url if admin else "")
    if says is None:
        assert 'id="gpuhub-no-gpu"' not in html
        return
    assert 'id="gpuhub-no-gpu"' in html and says in html
    assert (f'href="{url}"' in html) == admin
    assert ("Ask an admin" in html) == (not admin)


# ---- shares of one GPU (a pool with GpuHubService.gpu_sharing) ----------------------------

H200_MIB = 144384  # 141 GiB: a quarter is 35.2 GiB


def shared_pool(units=4, teams=None, enforcement=None, nodes=(4,)):
    p = pool("h200", teams=teams, nodes=nodes, model="H200", mib=H200_MIB)
    p["sharing"] = {"share_units": units, "gpu_memory_mib": H200_MIB,
                    "share_memory_mib": H200_MIB // units, "smallest_share": f"1/{units}"}
    if enforcement is not None:
        p["sharing"]["enforcement"] = enforcement
    return p


def h200_team(nominal=1, borrowing=0, limit=None):
    t = {"name": "vision", "quotas": {"h200": {"nominal": nominal, "borrowing_limit": borrowing}}}
    if limit is not None:
        t["notebook_gpu_limits"] = {"h200": limit}
    return t


@pytest.mark.parametrize("options, gpus, share", [
    ({"gpu_choice": ["h200:1/4"]}, 1, Fraction(1, 4)),
    ({"gpu_choice": ["h200:3/4"]}, 1, Fraction(3, 4)),
    ({"gpu_choice": ["h200:1"]}, 1, None),
    ({"pool": "h200", "gpus": 1, "gpu_share": "", "gpu_memory": ""}, 1, None),
    ({"pool": "h200", "gpu_share": "1/4"}, 1, Fraction(1, 4)),
    ({"pool": "h200", "gpus": 1, "gpu_share": 0.25}, 1, Fraction(1, 4)),
    ({"pool": "h200", "gpu_share": "1/3"}, 1, Fraction(1, 2)),       # rounded up to slots
    ({"pool": "h200", "gpu_memory": "35GiB"}, 1, Fraction(1, 4)),    # 35 GiB <= 35.25
    ({"pool": "h200", "gpu_memory": "36GiB"}, 1, Fraction(1, 2)),
    ({"pool": "h200", "gpu_memory": 70, "gpu_share": "1/4"}, 1, Fraction(1, 2)),  # the larger
])
def test_a_share_is_parsed_and_rounded_up_to_the_pools_slots(options, gpus, share):
    r = parse_options(options, offers([shared_pool()], [h200_team()]))
    assert (r.team, r.pool, r.gpus, r.share) == ("vision", "h200", gpus, share)


@pytest.mark.parametrize("pools, options, field, words", [
    ([pool("h200", model="H200")], {"gpu_choice": "h200:1/4"}, "gpu_share",
     "pool 'h200' does not share its GPUs"),
    ([shared_pool()], {"pool": "h200", "gpus": 2, "gpu_share": "1/4"}, "gpu_share",
     "share of one GPU"),
    ([shared_pool()], {"pool": "h200", "gpu_share": "4/4"}, "gpu_share", "less than one GPU"),
    ([shared_pool()], {"pool": "h200", "gpu_share": "a quarter"}, "gpu_share", "'1/4' or 0.25"),
    ([shared_pool()], {"pool": "h200", "gpu_share": "1/0"}, "gpu_share", "divides by zero"),
    ([shared_pool()], {"pool": "h200", "gpu_share": "7/8"}, "gpu_share",
     "rounds up to a whole h200 GPU (shares there are 1/4 of a GPU, 35.2 GiB each)"),
    ([shared_pool()], {"pool": "h200", "gpu_memory": "lots"}, "gpu_memory", "'35GiB'"),
    ([shared_pool()], {"pool": "h200", "gpu_memory": "200GiB"}, "gpu_memory",
     "more than a whole h200 GPU has"),
    ([shared_pool()], {"pool": "h200", "gpu_memory": 5.9e307}, "gpu_memory",
     "more memory than any GPU has"),
    ([shared_pool()], {"pool": "h200", "gpu_memory": 0}, "gpu_memory", "at least 1 MiB"),
])
def test_a_share_is_refused_with_the_field_and_why(pools, options, field, words):
    with pytest.raises(OptionsError) as e:
        parse_options(options, offers(pools, [h200_team()]))
    assert e.value.field == field and words in e.value.message


def test_a_team_with_no_gpu_there_gets_no_share_either():
    with pytest.raises(OptionsError) as e:
        parse_options({"gpu_choice": "h200:1/4"},
                      offers([shared_pool()], [h200_team(nominal=0, borrowing=0)]))
    assert "can get no h200 GPU, nor part of one" in e.value.message


@pytest.mark.parametrize("used, units, says", [
    (0, 0.25, None),
    (0.75, 0.25, None),               # 0.75 + 0.25 is within a nominal of 1
    (0.75, 0.5, "waits in the queue"),  # no borrowing: over the ceiling
    (1, 0.25, "waits in the queue"),
])
def test_a_share_counts_its_units_against_the_quota(used, units, says):
    offer = offers([shared_pool(teams={"vision": used})], [h200_team()])["vision"][0]
    note = offer.note(units)
    assert (says in note) if says else note == ""


def test_a_share_within_nominal_but_above_used_borrows_when_the_team_may():
    nlp = {"name": "nlp", "quotas": {"h200": {"nominal": 2}}}
    offer = offers([shared_pool(teams={"vision": 1})], [h200_team(borrowing=1)],
                   [h200_team(borrowing=1), nlp])["vision"][0]
    assert "may be preempted" in offer.note(0.25)


def options_of(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<option value="([^"]+)"(?: selected)?>([^<]*)</option>', html)


def test_form_offers_shares_before_whole_gpus_with_their_memory():
    html = render_form(offers([shared_pool()], [h200_team(nominal=2)]))
    assert options_of(html) == [
        ("h200:1/4", "1/4 H200 · 35.2 GiB"), ("h200:1/2", "1/2 H200 · 70.5 GiB"),
        ("h200:3/4", "3/4 H200 · 105.8 GiB"), ("h200:1", "1 GPU"), ("h200:2", "2 GPUs")]
    # The card's radio starts on the select's first option: the smallest
    # share, which the form starts on (the team has it free now).
    assert '<input type="radio" name="gpu_choice" value="h200:1/4" checked>' in html
    assert ("Shared GPUs: from 1/4 of a GPU; memory watched; compute time-sliced "
            "(not enforced).") in html


def test_form_says_the_services_enforcement_labels_when_it_gives_them():
    html = render_form(offers([shared_pool(8, enforcement={
        "memory": "watched: a share above its memory is warned, then stopped",
        "compute": "MPS: enforced"})], [h200_team()]))
    assert ("from 1/8 of a GPU; memory watched: a share above its memory is warned, then "
            "stopped; compute MPS: enforced.") in html
    assert [v for v, _ in options_of(html)] == [
        "h200:1/8", "h200:1/4", "h200:3/8", "h200:1/2", "h200:5/8", "h200:3/4", "h200:7/8",
        "h200:1"]


def test_form_quota_counts_shares_in_gpu_units():
    html = render_form(offers([shared_pool(teams={"vision": 0.75})], [h200_team()]))
    assert "0.25 of its 1 h200 GPU free in its quota (may borrow 0)" in html
    labels = dict(options_of(html))
    assert labels["h200:1/4"] == "1/4 H200 · 35.2 GiB"        # fits the quarter left
    assert "waits in the queue" in labels["h200:1/2"]


def test_form_for_a_pool_that_does_not_share_offers_whole_gpus_only():
    html = render_form(offers([pool()], [team()]))
    assert "Shared GPUs" not in html and "/" not in "".join(v for v, _ in options_of(html))


# ---- the choice the form starts on ----------------------------------------------------

@pytest.mark.parametrize("pools, teams, chosen, start", [
    # Free quota on idle GPUs: the smallest GPU choice, not CPU only.
    ([pool()], [team()], None, "a100:1"),
    ([pool(teams={"vision": 1})], [team()], None, "a100:1"),
    # Its quota is in use (the next GPU would borrow or wait), or the pool has no idle GPU.
    ([pool(teams={"vision": 2})], [team()], None, None),
    ([pool(free=0)], [team()], None, None),
    ([pool()], [team(nominal=0, borrowing=2)], None, None),
    ([pool()], [team(limit=0)], None, None),
    # A sharing pool: the smallest share; a quarter left in the quota is still one.
    ([shared_pool()], [h200_team()], None, "h200:1/4"),
    ([shared_pool(teams={"vision": 0.75})], [h200_team()], None, "h200:1/4"),
    # Of two pools, the smaller choice; of equals, the first pool's.
    ([pool(), shared_pool()], [{"name": "vision", "quotas": {
        "a100": {"nominal": 2, "borrowing_limit": 0},
        "h200": {"nominal": 1, "borrowing_limit": 0}}}], None, "h200:1/4"),
    # Several teams: for the team the form starts on (the chosen one, else the first).
    ([pool()], [team("nlp", nominal=0, borrowing=0), team("vision")], None, None),
    ([pool()], [team("nlp", nominal=0, borrowing=0), team("vision")], "vision", "a100:1"),
])
def test_form_starts_on_the_smallest_gpu_choice_the_team_gets_now(pools, teams, chosen, start):
    offered = offers(pools, teams)
    assert preselect(offered, chosen or sorted(offered)[0]) == start
    html = render_form(offered, chosen_team=chosen)
    checked = re.findall(r'name="gpu_choice" value="([^"]*)" ?checked', html)
    assert checked == [start or ":0"]
    if start:
        assert f'<option value="{start}" selected>' in html
    if chosen:
        assert f'<option value="{chosen}" selected>' in html
