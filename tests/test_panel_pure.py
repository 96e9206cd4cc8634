"""The admin panel's pure parts: charts, the quota form, the cluster model."""
from __future__ import annotations

import re

import pytest

from gpuspawner.scheduler.model import Quota
from gpuspawner.service.panel import charts
from gpuspawner.service.panel.base import environment
from gpuspawner.service.panel.cluster import cluster_model, gpu_state, share_slots, sharing_note
from gpuspawner.service.panel.glance import output_in_workspace
from gpuspawner.service.panel.units import gpus_text, units_text
from gpuspawner.store import WorkloadRow
from gpuspawner.service.panel.pages import parse_quota_form
from gpuspawner.vocab.specs import SpecError


@pytest.mark.parametrize("value, top", [(0, 1), (0.004, 0.01), (0.7, 1), (3, 5), (12, 20),
                                        (100, 100), (101, 200), (4500, 5000)])
def test_axis_top_is_a_round_number_at_or_above_the_data(value, top):
    assert charts._nice_max(value) == pytest.approx(top)


@pytest.mark.parametrize("value, text", [(0, "0"), (2, "2"), (0.0034, "0.0034"), (2.5, "2.5"),
                                         (0.25, "0.25"),  # a 1/4 share for an hour
                                         (12.345, "12.35"), (250.4, "250")])
def test_values_keep_the_digits_that_matter(value, text):
    assert charts._fmt(value) == text


def test_stacked_area_draws_a_band_per_series_with_the_same_colours_as_the_bars():
    series = {"nlp": [1.0, 0.0, 2.0], "vision": [0.5, 0.5, 0.5]}
    colours = charts.colours_for(series)
    svg = charts.stacked_area(["d1", "d2", "d3"], series, colours=colours)
    fills = re.findall(r'<polygon points="[^"]+" fill="([^"]+)"', svg)
    assert fills == [colours["nlp"], colours["vision"]]
    assert "nlp: 3 GPU-hours" in svg and "vision: 1.5 GPU-hours" in svg
    bars = charts.bars([("vision", 1.5), ("nlp", 3.0)], colours=colours)
    assert re.findall(r'<rect [^>]*fill="([^"]+)"', bars) == [colours["vision"], colours["nlp"]]


def test_bar_lengths_are_proportional():
    svg = charts.bars([("a", 4.0), ("b", 1.0)], note={"a": "9.60 USD"})
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)"', svg)]
    assert widths[0] == pytest.approx(4 * widths[1])
    assert "4 GPU-hours · 9.60 USD" in svg


def test_empty_charts_say_so():
    assert "no usage in this period" in charts.stacked_area(["d1"], {})
    assert "no usage in this period" in charts.bars([])


@pytest.mark.parametrize("util, colour", [(None, "#d9d9d9"), (0, "hsl(210, 70%, 90%)"),
                                          (100, "hsl(0, 75%, 45%)"), (150, "hsl(0, 75%, 45%)")])
def test_heat_colour(util, colour):
    assert charts.heat(util) == colour


POOLS = ["a100"]


@pytest.mark.parametrize(
    "form, weight, quota",
    [
        pytest.param({"weight": "2", "a100.nominal": "4", "a100.borrowing_limit": "",
                      "a100.lending_limit": "1"}, 2.0, Quota(4, None, 1), id="empty-is-no-limit"),
        pytest.param({"weight": "0.5", "a100.nominal": " 0 ", "a100.borrowing_limit": "0",
                      "a100.lending_limit": ""}, 0.5, Quota(0, 0, None), id="zeros"),
        pytest.param({"weight": "1", "a100.nominal": "2", "a100.cpus": "16",
                      "a100.memory": "64GiB"}, 1.0, Quota(2, None, None, 16.0, 64 << 30),
                     id="cpu-and-memory-ceilings"),
        pytest.param({"weight": "1", "a100.nominal": "2", "a100.cpus": " ", "a100.memory": ""},
                     1.0, Quota(2, None, None, None, None), id="empty-ceilings-are-no-limit"),
    ],
)
def test_quota_form_parses(form, weight, quota):
    assert parse_quota_form(POOLS, form) == (weight, {"a100": quota})


@pytest.mark.parametrize(
    "form, field, words",
    [
        pytest.param({"weight": "heavy"}, "weight", "must be a number", id="weight-text"),
        pytest.param({"weight": "0"}, "weight", "(0, 1000]", id="weight-zero"),
        pytest.param({"weight": "1", "a100.nominal": ""}, "quotas.a100.nominal",
                     "whole number", id="nominal-empty"),
        pytest.param({"weight": "1", "a100.nominal": "-2"}, "quotas.a100.nominal",
                     "got '-2'", id="nominal-negative"),
        pytest.param({"weight": "1", "a100.nominal": "2", "a100.borrowing_limit": "1.5"},
                     "quotas.a100.borrowing_limit", "or empty (no limit)", id="fraction"),
        pytest.param({"weight": "1", "a100.nominal": "2", "a100.cpus": "many"},
                     "quotas.a100.cpus", "not a positive number of CPUs", id="cpus-text"),
        pytest.param({"weight": "1", "a100.nominal": "2", "a100.memory": "lots"},
                     "quotas.a100.memory", "not a memory size", id="memory-text"),
    ],
)
def test_quota_form_names_the_bad_field(form, field, words):
    with pytest.raises(SpecError) as e:
        parse_quota_form(POOLS, form)
    assert e.value.field == field and words in str(e.value)


@pytest.mark.parametrize("device, state", [
    ({"healthy": True}, "free"),
    ({"healthy": True, "workload": {"id": "w1"}}, "in use"),
    ({"healthy": False, "workload": {"id": "w1"}}, "unhealthy"),
    ({"healthy": True, "admin_mark": "by root: fan"}, "out of service"),
])
def test_gpu_state(device, state):
    assert gpu_state(device) == state


def test_cluster_model_counts_and_colours_per_pool():
    pools = [{"name": "a100", "nodes": [{"name": "n1", "devices": [
        {"index": i, "healthy": i != 2, "admin_mark": "by x: y" if i == 3 else ""}
        for i in range(4)]}]}]
    samples = [{"node": "n1", "gpu": 0, "utilization_pct": 97.0, "memory_used_mib": 1000,
                "workload": {"id": "w1", "kind": "job", "user": "u", "team": "t"}},
               {"node": "n1", "gpu": 1, "utilization_pct": None, "memory_used_mib": None,
                "workload": None}]
    [pool] = cluster_model(pools, samples)
    assert pool["counts"] == {"in use": 1, "free": 1, "unhealthy": 1, "out of service": 1}
    cells = pool["nodes"][0]["cells"]
    assert cells[0]["colour"] == charts.heat(97.0) and cells[0]["text_colour"] == "#fff"
    assert cells[1]["colour"] == "#d9d9d9"


@pytest.mark.parametrize("spec, output", [
    ({"notebook": "t.ipynb", "working_dir": "/ws/alice/p", "output_notebook": "out/t-1.ipynb"},
     "p/out/t-1.ipynb"),
    ({"notebook": "t.ipynb", "working_dir": "/ws/alice", "output_notebook": "/ws/alice/o.ipynb"},
     "o.ipynb"),
    ({"notebook": "t.ipynb", "working_dir": "/ws/alice"}, None),   # in the attempt's directory
    ({"notebook": "t.ipynb", "working_dir": "/ws/alice", "output_notebook": "/tmp/o.ipynb"}, None),
    ({"notebook": "t.ipynb", "working_dir": "/ws/alice", "output_notebook": "../bob/o.ipynb"},
     None),
    ({"command": ["python", "x.py"], "working_dir": "/ws/alice"}, None),
])
def test_the_glance_links_an_output_notebook_only_inside_the_workspace(spec, output):
    assert output_in_workspace(WorkloadRow(spec=spec), "/ws/alice") == output


# ---- a pool whose GPUs are shared (GpuHubService.gpu_sharing) -----------------------------

H200_MIB = 144384
SHARING = {"share_units": 4, "gpu_memory_mib": H200_MIB, "share_memory_mib": H200_MIB // 4,
           "smallest_share": "1/4"}


def share(wid, user, fraction, used=None, label=None):
    return {"workload": {"id": wid, "kind": "notebook", "user": user, "team": "vision",
                         "name": f"{user}-nb"},
            "share": fraction, "label": label or f"{round(fraction * 4)}/4".replace("2/4", "1/2"),
            "memory_limit_mib": int(fraction * H200_MIB), "memory_used_mib": used}


@pytest.mark.parametrize("shares, drawn", [
    ([], ["free"] * 4),
    ([share("w1", "alice", 0.25, 12288)], ["1/4", "free", "free", "free"]),
    ([share("w1", "alice", 0.25), share("w2", "bob", 0.5)], ["1/4", "1/2", "free"]),
    ([share(f"w{i}", "u", 0.25) for i in range(4)], ["1/4"] * 4),
])
def test_a_shared_gpu_is_drawn_in_its_slots_with_the_free_ones_empty(shares, drawn):
    slots = share_slots(shares, 4)
    assert ["free" if s.get("free") else s["label"] for s in slots] == drawn
    assert sum(s["slots"] for s in slots) == 4


@pytest.mark.parametrize("used, memory, over", [
    (12288, "12.0 / 35.2 GiB", False),
    (None, "– / 35.2 GiB", False),         # NVML gave no per-process figure
    (40960, "40.0 / 35.2 GiB", True),
])
def test_a_share_says_its_owner_and_memory_used_of_its_limit(used, memory, over):
    [seg, *_] = share_slots([share("w1", "alice", 0.25, used)], 4)
    assert (seg["owner"], seg["memory"], seg["over"]) == ("alice · alice-nb", memory, over)


def test_a_default_servers_share_is_owned_by_its_user_and_workload():
    unnamed = share("w7", "alice", 0.25)
    unnamed["workload"]["name"] = ""
    assert share_slots([unnamed], 4)[0]["owner"] == "alice · notebook w7"


@pytest.mark.parametrize("enforcement, words", [
    (None, "GPUs shared in 4 slots of 35.2 GiB; memory watched: a share above its memory is "
           "warned, then stopped; compute time-sliced (not enforced)"),
    ({"memory": "watched: a share above its memory is warned, then stopped",
      "compute": "MPS: enforced"}, "; compute MPS: enforced"),
])
def test_a_sharing_pool_says_how_its_shares_are_enforced(enforcement, words):
    sharing = {**SHARING, **({"enforcement": enforcement} if enforcement else {})}
    assert words in sharing_note(sharing)


def shared_cluster():
    pools = [{"name": "h200", "sharing": SHARING, "queued_workloads": 0, "queued_gpus": 0,
              "nodes": [{"name": "n1", "gpus": 3, "source": "declared", "drained": False,
                         "devices": [{"index": i, "healthy": True, "model": "H200",
                                      "memory_mib": H200_MIB, "uuid": f"GPU-{i}"}
                                     for i in range(3)]}]}]
    samples = [
        {"node": "n1", "gpu": 0, "utilization_pct": 40.0, "memory_used_mib": 20000,
         "workload": None, "share_units": 4,
         "enforcement": {"memory": "enforced (watched, stopped above its share)",
                         "compute": "time-sliced (advisory)"},
         "shares": [{**share("w1", "alice", 0.25, 12288), "utilization_pct": 35.0},
                    share("w2", "bob", 0.5, None)]},
        {"node": "n1", "gpu": 1, "utilization_pct": 90.0, "memory_used_mib": 70000,
         "workload": {"id": "w3", "kind": "job", "user": "carol", "team": "vision",
                      "name": "train"}, "share_units": 4, "shares": []},
        {"node": "n1", "gpu": 2, "utilization_pct": 0.0, "memory_used_mib": 0,
         "workload": None, "share_units": 4, "shares": []},
    ]
    return cluster_model(pools, samples)


def test_cluster_model_counts_a_shared_gpu_in_use_and_its_free_slots():
    [pool] = shared_cluster()
    assert pool["counts"] == {"in use": 2, "free": 1, "unhealthy": 0, "out of service": 0}
    assert pool["free_slots"] == 1       # the shared GPU's last quarter
    shared, whole, free = pool["nodes"][0]["cells"]
    assert [s.get("label", "free") for s in shared["slots"]] == ["1/4", "1/2", "free"]
    assert "slots" not in whole and "slots" not in free


def test_the_heat_map_draws_each_share_with_its_owner_and_the_enforcement():
    html = environment().get_template("_heatmap.html").render(pools=shared_cluster())
    cell = re.search(r'<div class="gpu [^>]*data-gpu="0".*?</ul>', html, re.S).group(0)
    slots = re.findall(r'class="slot (share|free)', cell)
    assert slots == ["share", "share", "free"]
    assert re.findall(r'style="flex: (\d)', cell) == ["1", "2", "1"]
    assert ("alice · alice-nb</span> · <span class=\"share-memory\">12.0 / 35.2 GiB</span> · "
            "<span class=\"share-util\">35%</span>") in cell
    assert "bob · bob-nb</span> · <span class=\"share-memory\">– / 70.5 GiB</span></li>" in cell
    # The GPU's own compute label (MPS is decided per GPU).
    assert re.search(r'class="small share-compute">compute time-sliced \(advisory\)<', html)
    assert "1 free 1/4 slots on shared GPUs" in html
    assert "compute time-sliced (not enforced)." in html
    # The whole-GPU job's GPU says its holder as before.
    assert "job w3 · carol (vision)" in html


@pytest.mark.parametrize("units, text", [(0, "0"), (1.0, "1"), (0.25, "0.25"), (3.75, "3.75"),
                                         (0.125, "0.125"), (0.0625, "0.0625"), (12.5, "12.5")])
def test_gpu_units_are_printed_without_rounding_a_share_away(units, text):
    assert units_text(units) == text


@pytest.mark.parametrize("workload, text", [
    ({"gpus": 2, "gpu_share": None}, "2"), ({"gpus": 1, "gpu_share": 0.25}, "1/4"),
    ({"gpus": 1, "gpu_share": 0.75}, "3/4"), ({"gpus": 1, "gpu_share": 0.0625}, "1/16"),
    ({"gpus": 1, "gpu_share": 0.0}, "1"),
])
def test_a_workloads_gpus_say_its_share(workload, text):
    assert gpus_text(workload) == text


def test_the_glance_shows_a_share_and_fractional_use():
    html = environment().get_template("_glance.html").render(
        gpus=0.25, teams=[{"name": "vision", "quotas": {"h200": {
            "used": 0.75, "nominal": 1, "borrowing_limit": 0}}}],
        workloads=[{"id": "w1", "kind": "notebook", "name": "", "team": "vision", "gpus": 1,
                    "gpu_share": 0.25, "pool": "h200", "state": "running", "reason": ""}],
        finished=[], deployments=[])
    assert 'id="my-gpus">0.25<' in html
    assert "<td>h200</td><td>0.75</td><td>1</td>" in html
    assert "<td>1/4 × h200</td>" in html
