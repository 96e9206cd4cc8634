"""The spawn form's choices and the checks of user_options: pure tables."""
from __future__ import annotations

import pytest

from gpuspawner.spawner.options import OptionsError, offers, parse_options, render_form


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


@pytest.mark.parametrize("used, gpus, borrowing, says", [
    (0, 2, 2, None),
    (1, 2, 2, "may be preempted"),
    (2, 1, 2, "may be preempted"),
    (0, 3, None, "may be preempted"),
    (2, 1, 0, "waits in the queue"),
    (3, 2, 2, "waits in the queue"),
])
def test_choice_says_whether_it_borrows_or_waits(used, gpus, borrowing, says):
    offer = offers([pool(teams={"vision": used})], [team(borrowing=borrowing)])["vision"][0]
    note = offer.note(gpus)
    assert (says in note) if says else note == ""


def test_form_lists_what_the_team_can_get():
    html = render_form(offers([pool()], [team(limit=3)]))
    assert 'value=":0" checked' in html
    assert [f'value="a100:{n}"' in html for n in (1, 2, 3, 4)] == [True, True, True, False]
    assert "NVIDIA A100 (80 GiB)" in html and 'name="team" value="vision"' in html


def test_form_is_a_card_per_choice_with_the_quota_said_once():
    html = render_form(offers([pool(teams={"vision": 1})], [team()]))
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
