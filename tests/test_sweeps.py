"""Sweeps: the grid's expansion and each task's spec (pure), the metric
read from a notebook's scraps or a metrics.json, and the engine on a real
database: the cap, the summary, cancel-all, retry-failed, a sweep as a
dependency, and a restart."""
from __future__ import annotations

import json
import os

import pytest

from gpuspawner.backends.base import EXITED, STOPPED, AttemptExit
from gpuspawner.service.sweeps import sweeps
from gpuspawner.service.sweeps.scraps import notebook_scraps, read_metric
from gpuspawner.vocab.specs import SpecError, parse_job
from gpuspawner.vocab.sweeps import best_index, expand, parse_sweep, task_spec

from test_engine_steps import ALICE, make_engine, row_of

SID = "s0123456789ab"


@pytest.mark.parametrize("grid,tasks,expected", [
    ({"lr": [1, 2], "bs": ["a", "b"]}, None,
     [{"lr": 1, "bs": "a"}, {"lr": 1, "bs": "b"}, {"lr": 2, "bs": "a"}, {"lr": 2, "bs": "b"}]),
    ({"x": [0]}, None, [{"x": 0}]),
    (None, [{"x": 1}, {"x": 2, "y": 3}], [{"x": 1}, {"x": 2, "y": 3}]),
])
def test_a_grid_is_its_cartesian_product_in_key_order(grid, tasks, expected):
    assert expand(grid, tasks) == expected


@pytest.mark.parametrize("grid,tasks,field", [
    (None, None, "grid"),
    ({"x": [1]}, [{"x": 1}], "grid"),
    ({}, None, "grid"),
    ({"x": []}, None, "grid.x"),
    ({"x": 1}, None, "grid.x"),
    ({"a-b": [1]}, None, "grid"),
    ({f"p{i}": [1, 2] for i in range(14)}, None, "grid"),  # 16384 tasks
    (None, [], "tasks"),
    (None, [{"x": 1}, 3], "tasks[1]"),
    (None, [{"1x": 1}], "tasks[0]"),
])
def test_a_bad_grid_is_refused_naming_the_field(grid, tasks, field):
    with pytest.raises(SpecError) as e:
        expand(grid, tasks)
    assert e.value.field == field


@pytest.mark.parametrize("body,field", [
    ({"grid": {"x": [1]}}, "template"),
    ({"template": {"command": ["true"], "pool": "p", "after": []}, "grid": {"x": [1]}},
     "template.after"),
    ({"template": {"command": ["true"]}, "grid": {"x": [1]}}, "template.pool"),
    ({"template": {"command": ["true"], "pool": "p"}, "grid": {"x": [[1]]}}, "tasks[0].x"),
    ({"template": {"command": ["true"], "pool": "p"}, "grid": {"x": [1]}, "max_running": 0},
     "max_running"),
    ({"template": {"command": ["true"], "pool": "p"}, "grid": {"x": [1]},
      "metric": {"name": "acc", "goal": "up"}}, "metric.goal"),
    ({"template": {"command": ["true"], "pool": "p"}, "grid": {"x": [1]}, "every": "1h"},
     "every"),
])
def test_a_bad_sweep_is_refused_naming_the_field(body, field):
    with pytest.raises(SpecError) as e:
        parse_sweep(body)
    assert e.value.field == field


def test_a_command_task_gets_its_parameters_as_env_and_in_its_arguments():
    template = parse_job({"command": ["train.py", "--lr={lr}", "{bs}", "{other}", "{ {lr} }"],
                          "pool": "p", "name": "grid"})
    spec = task_spec(template, {"lr": 0.01, "bs": "big", "flag": True}, SID, 3)
    assert spec.command == ("train.py", "--lr=0.01", "big", "{other}", "{ 0.01 }")
    assert spec.env == {"GPUHUB_SWEEP_ID": SID, "GPUHUB_SWEEP_INDEX": "3",
                        "GPUHUB_PARAM_LR": "0.01", "GPUHUB_PARAM_BS": "big",
                        "GPUHUB_PARAM_FLAG": "true"}
    assert spec.name == "grid-3"


def test_a_notebook_task_gets_its_parameters_merged_into_papermills():
    template = parse_job({"notebook": "train.ipynb", "pool": "p",
                          "parameters": {"epochs": 3, "lr": 1}})
    spec = task_spec(template, {"lr": 0.1}, SID, 0)
    assert spec.parameters == {"epochs": 3, "lr": 0.1}
    assert "GPUHUB_PARAM_LR" not in spec.env and spec.name == "sweep-0"
    assert spec.output_notebook is None  # the attempt's directory, its own already


@pytest.mark.parametrize("template_output, index, task_output", [
    ("out/train-1.ipynb", 3, "out/train-1-3.ipynb"),
    ("/home/a/out/train.v2.ipynb", 0, "/home/a/out/train.v2-0.ipynb"),
    ("out/executed", 12, "out/executed-12.ipynb"),
])
def test_each_notebook_task_writes_its_own_output_notebook(template_output, index, task_output):
    template = parse_job({"notebook": "train.ipynb", "pool": "p",
                          "output_notebook": template_output})
    assert task_spec(template, {"lr": 0.1}, SID, index).output_notebook == task_output


def glue(name, data):
    """An output as scrapbook's ``glue`` writes it."""
    return {"output_type": "display_data", "metadata": {"scrapbook": {"name": name, "data": True,
                                                                     "display": False}},
            "data": {"application/scrapbook.scrap.json+json": {
                "name": name, "data": data, "encoder": "json", "version": 1}}}


NOTEBOOK = {"cells": [
    {"cell_type": "code", "outputs": [glue("acc", 0.5), {"output_type": "stream", "text": "x"}]},
    {"cell_type": "markdown"},
    {"cell_type": "code", "outputs": [
        glue("acc", 0.75),
        {"output_type": "display_data",
         "data": {"application/papermill.record+json": {"loss": 0.25}}}]}]}


def test_the_scraps_of_a_notebook_later_ones_winning():
    assert notebook_scraps(NOTEBOOK) == {"acc": 0.75, "loss": 0.25}


@pytest.mark.parametrize("name,in_notebook,metrics,expected", [
    ("acc", True, None, 0.75),
    ("loss", True, {"loss": 9}, 0.25),
    ("f1", True, {"f1": 0.5}, 0.5),          # not a scrap: the metrics file
    ("f1", False, {"f1": 2}, 2.0),
    ("f1", False, {"f1": "high"}, None),     # not a number
    ("f1", False, None, None),
])
def test_the_metric_comes_from_the_scraps_else_metrics_json(tmp_path, name, in_notebook, metrics,
                                                           expected):
    nb = tmp_path / "out.ipynb"
    nb.write_text(json.dumps(NOTEBOOK))
    if metrics is not None:
        (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert read_metric(name, str(nb) if in_notebook else None, [str(tmp_path)]) == expected


def test_a_link_is_not_read_for_a_metric(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"acc": 1.0}))
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "metrics.json").symlink_to(secret)
    assert read_metric("acc", None, [str(tmp_path / "job")]) is None


@pytest.mark.parametrize("values,goal,expected", [
    ({0: 0.5, 1: 0.9, 2: 0.9}, "max", 1), ({0: 0.5, 1: 0.9}, "min", 0), ({}, "max", None)])
def test_the_best_task(values, goal, expected):
    assert best_index(values, goal) == expected


# ---- the engine ---------------------------------------------------------------------
def sweep_of(n, max_running=None, metric=None, after=None, gpus=1):
    body = {"template": {"command": ["true", "{x}"], "pool": "default", "gpus": gpus},
            "tasks": [{"x": i} for i in range(n)], "max_running": max_running, "name": "grid"}
    if metric:
        body["metric"] = metric
    if after:
        body["after"] = after
    return parse_sweep(body)


def states(engine, sid):
    return [t["state"] for t in sweeps.get(engine.facades, ALICE, sid)["tasks"]]


def end(engine, wid, code=0):
    row = row_of(engine, wid)
    engine.backend.exits.append(AttemptExit(wid, row.attempt, EXITED, code, engine.clock()))


def task_ids(engine, sid):
    return [t["workload_id"] for t in sweeps.get(engine.facades, ALICE, sid)["tasks"]]


def test_at_most_max_running_tasks_are_queued_or_running(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=4)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(5, max_running=2))
    engine.tick()
    assert states(engine, sw.id) == ["running", "running", "waiting", "waiting", "waiting"]
    ids = task_ids(engine, sw.id)
    assert not set(ids[2:]) & set(engine.scheduler.state.pending)  # hold nothing
    assert row_of(engine, ids[2]).reason == (f"waiting for a slot of sweep {sw.id} "
                                            f"(at most 2 at once)")
    end(engine, ids[0])
    engine.tick()
    assert states(engine, sw.id) == ["succeeded", "running", "running", "waiting", "waiting"]
    view = sweeps.get(engine.facades, ALICE, sw.id)
    assert (view["state"], view["total"], view["counts"]["running"],
            view["counts"]["waiting"], view["counts"]["succeeded"]) == ("running", 5, 2, 2, 1)
    assert row_of(engine, ids[2]).spec["command"] == ["true", "2"]
    assert row_of(engine, ids[2]).spec["env"]["GPUHUB_PARAM_X"] == "2"


def test_each_task_is_admitted_against_its_teams_quota(db_url, tmp_path):
    """Without a cap, the pool (the team's quota here) bounds what runs."""
    engine = make_engine(db_url, tmp_path, gpus=2)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(4))
    engine.tick()
    assert sorted(states(engine, sw.id)) == ["queued", "queued", "running", "running"]
    # Cancel-all: the queued ones end at once and leave the queue; the running ones stop.
    sweeps.cancel(engine.facades, ALICE, sw.id)
    assert sorted(states(engine, sw.id)) == ["cancelled", "cancelled", "stopping", "stopping"]
    assert not set(task_ids(engine, sw.id)) & set(engine.scheduler.state.pending)


def test_cancel_all_then_retry_the_cancelled_and_failed(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=4)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(4, max_running=2))
    engine.tick()
    first = task_ids(engine, sw.id)
    end(engine, first[0])
    end(engine, first[1], code=3)
    engine.tick()
    sweeps.cancel(engine.facades, ALICE, sw.id)
    assert states(engine, sw.id)[2:] == ["stopping", "stopping"]
    for wid in first[2:]:  # the test backend reports their stop
        engine.backend.exits.append(AttemptExit(wid, 0, STOPPED, -15, engine.clock()))
    engine.tick()
    engine.tick()
    view = sweeps.get(engine.facades, ALICE, sw.id)
    assert [t["state"] for t in view["tasks"]] == ["succeeded", "failed", "cancelled",
                                                    "cancelled"]
    assert view["state"] == "cancelled" and view["finished_at"] is not None
    sweeps.retry(engine.facades, ALICE, sw.id)
    engine.tick()
    view = sweeps.get(engine.facades, ALICE, sw.id)
    again = [t["workload_id"] for t in view["tasks"]]
    assert again[0] == first[0] and not set(again[1:]) & set(first)
    assert [t["state"] for t in view["tasks"]] == ["succeeded", "running", "running", "waiting"]
    assert row_of(engine, again[3]).spec["command"] == ["true", "3"]
    assert view["state"] == "running"
    for wid in again[1:3]:
        end(engine, wid)
    engine.tick()
    end(engine, again[3])
    engine.tick()
    engine.tick()
    assert sweeps.get(engine.facades, ALICE, sw.id)["state"] == "succeeded"
    with pytest.raises(Exception) as e:
        sweeps.retry(engine.facades, ALICE, sw.id)
    assert "no failed or cancelled task" in str(e.value)


def test_the_metric_and_the_best_task(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=4)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(3, metric={"name": "acc", "goal": "max"}))
    engine.tick()
    for wid, acc in zip(task_ids(engine, sw.id), (0.5, 0.9, 0.7)):
        # What the job writes in $GPUHUB_ATTEMPT_DIR (the test backend starts nothing).
        attempt_dir = engine.launcher.attempt_dir(wid, 0)
        os.makedirs(attempt_dir)
        with open(f"{attempt_dir}/metrics.json", "w") as f:
            json.dump({"acc": acc}, f)
        end(engine, wid)
    engine.tick()
    view = sweeps.get(engine.facades, ALICE, sw.id)
    assert [t["metric"] for t in view["tasks"]] == [0.5, 0.9, 0.7]
    assert view["best"] == {"index": 1, "parameters": {"x": 1}, "value": 0.9,
                            "workload_id": view["tasks"][1]["workload_id"]}
    assert view["state"] == "succeeded"


@pytest.mark.parametrize("code,state", [(0, "running"), (1, "cancelled")])
def test_a_job_after_a_whole_sweep(db_url, tmp_path, code, state):
    engine = make_engine(db_url, tmp_path, gpus=4)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(2))
    evaluate = engine.submit(ALICE, parse_job({"command": ["true"], "pool": "default",
                                               "after": [{"id": sw.id}]}))
    engine.tick()
    a, b = task_ids(engine, sw.id)
    end(engine, a)
    engine.tick()
    assert row_of(engine, evaluate.id).state == "waiting"
    end(engine, b, code)
    engine.tick()
    assert row_of(engine, evaluate.id).state == state
    if code:
        assert row_of(engine, evaluate.id).reason == f"dependency {sw.id} failed"


def test_a_sweep_after_a_job_and_a_restart(db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, gpus=4)
    prepare = engine.submit(ALICE, parse_job({"command": ["true"], "pool": "default"}))
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(3, max_running=1,
                                               after=[{"id": prepare.id}]))
    engine.tick()
    assert states(engine, sw.id) == ["waiting"] * 3
    reasons = {t["reason"] for t in sweeps.get(engine.facades, ALICE, sw.id)["tasks"]}
    assert reasons == {f"waiting for {prepare.id} (ok)"}
    engine.on_exit(AttemptExit(prepare.id, 0, EXITED, 0, engine.clock()))
    engine.starter.close()
    again = make_engine(db_url, tmp_path, gpus=4)
    again.tick()
    assert states(again, sw.id) == ["running", "waiting", "waiting"]
    assert sweeps.get(again, ALICE, sw.id)["tasks"][2]["reason"] == (
        f"waiting for a slot of sweep {sw.id} (at most 1 at once)")


def test_two_thousand_tasks_queue_and_a_capped_sweep_moves_on(db_url, tmp_path):
    """At the size `gpuhub bench sweeps` times: every task of a 2,000-task
    sweep reaches the queue, and a capped one fills a freed slot with its next task."""
    engine = make_engine(db_url, tmp_path, gpus=8)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(2000))
    engine.tick()
    assert sweeps.get(engine.facades, ALICE, sw.id)["counts"]["queued"] == 2000 - 8
    capped = sweeps.submit(engine.facades, ALICE, sweep_of(2000, max_running=4))
    engine.tick()
    assert states(engine, capped.id)[:5] == ["queued"] * 4 + ["waiting"]
    engine.cancel(ALICE, task_ids(engine, capped.id)[0])  # its slot goes to the next task
    engine.tick()
    assert states(engine, capped.id)[:6] == ["cancelled"] + ["queued"] * 4 + ["waiting"]


def test_a_task_that_left_a_hostile_file_still_ends(db_url, tmp_path):
    """A metrics file nested past the JSON parser's depth: no metric, the end recorded."""
    engine = make_engine(db_url, tmp_path, gpus=1)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(1, metric={"name": "acc", "goal": "max"}))
    engine.tick()
    (wid,) = task_ids(engine, sw.id)
    os.makedirs(engine.launcher.attempt_dir(wid, 0))
    with open(f"{engine.launcher.attempt_dir(wid, 0)}/metrics.json", "w") as f:
        f.write("[" * 100000 + "]" * 100000)
    end(engine, wid)
    engine.tick()
    view = sweeps.get(engine.facades, ALICE, sw.id)
    assert view["tasks"][0]["state"] == "succeeded" and view["tasks"][0]["metric"] is None
    assert view["state"] == "succeeded"


def test_another_team_cannot_see_a_sweep_and_a_teammate_cannot_change_it(db_url, tmp_path):
    from gpuspawner.service.errors import Forbidden, NotFound
    from gpuspawner.service.access.identity import Identity
    engine = make_engine(db_url, tmp_path, gpus=4)
    sw = sweeps.submit(engine.facades, ALICE, sweep_of(3, max_running=1))
    engine.tick()
    outsider = Identity("bob", teams=frozenset({"b"}), can_submit=True)
    teammate = Identity("carol", teams=frozenset({"a"}), can_submit=True)
    for act in (sweeps.get, sweeps.cancel, sweeps.retry):
        with pytest.raises(NotFound):
            act(engine, outsider, sw.id)
    assert sweeps.get(engine.facades, teammate, sw.id)["id"] == sw.id  # the team sees it
    for act in (sweeps.cancel, sweeps.retry):
        with pytest.raises(Forbidden):
            act(engine, teammate, sw.id)
    # Nothing of alice's sweep was touched by either of them.
    assert states(engine, sw.id) == ["running", "waiting", "waiting"]
