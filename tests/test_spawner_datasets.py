"""Datasets on the spawn form, offline: the form offers the datasets the
user's teams may read, a checked one goes into user_options and into the
server's workload, a refused one is refused on the form (403, the reason)
or by the service (its 403, as it says it); the server's folders come from
the service at its start; on Kubernetes the pod gets the jobs' read-only
subPath volumes (validated against the Kubernetes schema)."""
from __future__ import annotations

import asyncio
import logging
import types

import pytest
from tornado import web

from gpuspawner.client.errors import ApiError
from gpuspawner.spawner.datasets import parse_datasets, readable
from gpuspawner.spawner.options import GpuRequest, OptionsError

from test_kube_spawner import admitted, kubeconfig, make_spawner, manifest, run, workload  # noqa: F401
from test_spawner_admission import CannedService, RecordingSpawner

IMAGENET = {"name": "imagenet", "team": "vision", "shared_with": ["nlp"], "pools": [],
            "path": "/home/alice/imagenet"}
CENSUS = {"name": "census", "team": "vision", "shared_with": [], "pools": ["eu"],
          "path": "/home/alice/census"}
GENOMES = {"name": "genomes", "team": "bio", "shared_with": [], "pools": [],
           "path": "/home/bob/genomes"}
EVERY = [CENSUS, GENOMES, IMAGENET]


class DatasetService(CannedService):
    """The admission's service, plus the datasets: every one listed (the
    spawner's token is an admin's), the running server's folders given."""

    refuse_submit: ApiError | None = None
    no_datasets = False

    async def _send(self, request):
        if request.path == "/datasets" and self.no_datasets:
            raise ApiError(0, "cannot reach the GPU Hub service")
        if request.path == "/datasets":
            self.sent.append((request.method, request.path, request.body))
            return {"datasets": EVERY}
        if request.method == "POST" and request.path == "/workloads" and self.refuse_submit:
            raise self.refuse_submit
        if request.path == "/workloads/w1/datasets":
            self.sent.append((request.method, request.path, request.body))
            asked = {"imagenet": IMAGENET}
            return {"datasets": [{"name": n, "path": d["path"], "mount": f"/datasets/{n}"}
                                 for n, d in asked.items()]}
        return await super()._send(request)


class DatasetSpawner(RecordingSpawner):
    refuse_submit = None
    no_datasets = False

    def __init__(self):
        super().__init__()
        self.hub = types.SimpleNamespace(base_url="/hub/")
        self.log = logging.getLogger("test-spawner")  # a Spawner's own

    @property
    def gpuhub_api(self):
        api = DatasetService(self.sent)
        api.refuse_submit, api.no_datasets = self.refuse_submit, self.no_datasets
        return api


def test_the_form_offers_what_the_users_teams_may_read_and_the_server_gets_it():
    s = DatasetSpawner()
    form = asyncio.run(s._gpu_options_form())
    # vision's own two; bio's genomes is not offered
    assert 'name="datasets" value="imagenet"' in form and 'value="census"' in form
    assert "genomes" not in form
    assert "only in pool eu" in form and "/datasets/imagenet" in form
    s.user_options = s.options_from_form({"gpu_choice": ["h200:1"], "team": ["vision"],
                                          "datasets": ["imagenet"]})
    assert s.user_options["datasets"] == ["imagenet"]
    asyncio.run(s.admit())
    [body] = [b for m, p, b in s.sent if m == "POST" and p == "/workloads"]
    assert body["datasets"] == ["imagenet"]
    # asked for once the workload runs: the service checks again and audits the use
    assert ("POST", "/workloads/w1/datasets", None) in s.sent
    assert s.datasets == (("imagenet", "/home/alice/imagenet"),)
    assert s.gpu_env()["GPUHUB_DATASETS_DIR"] == "/datasets"


def test_the_form_without_the_datasets_listing_still_starts_servers():
    s = DatasetSpawner()
    s.no_datasets = True
    form = asyncio.run(s._gpu_options_form())
    assert 'name="gpu_choice"' in form and "datasets" not in form
    assert s.options_from_form({"gpu_choice": ["h200:1"], "team": ["vision"]})["gpus"] == 1


def test_a_server_without_datasets_asks_for_none():
    s = DatasetSpawner()
    asyncio.run(s._gpu_options_form())
    s.user_options = s.options_from_form({"gpu_choice": ["h200:1"], "team": ["vision"]})
    assert "datasets" not in s.user_options
    asyncio.run(s.admit())
    [body] = [b for m, p, b in s.sent if m == "POST" and p == "/workloads"]
    assert "datasets" not in body and s.datasets == ()
    assert not any(p.endswith("/datasets") and m == "POST" for m, p, b in s.sent)
    assert "GPUHUB_DATASETS_DIR" not in s.gpu_env()


@pytest.mark.parametrize("datasets, words", [
    (["genomes"], "no dataset genomes that you may read"),
    (["census"], "dataset census may only be read in pool eu"),
    (["Not A Name"], "is not a dataset name"),
])
def test_a_dataset_the_server_may_not_read_is_refused_on_the_form(datasets, words):
    s = DatasetSpawner()
    asyncio.run(s._gpu_options_form())
    with pytest.raises((web.HTTPError, ValueError)) as e:
        s.options_from_form({"gpu_choice": ["h200:1"], "team": ["vision"],
                             "datasets": datasets})
    assert words in str(e.value)
    if isinstance(e.value, web.HTTPError):
        assert e.value.status_code == 403
    assert not any(m == "POST" for m, p, b in s.sent)


def test_the_services_refusal_at_the_submit_is_the_spawns_with_its_reason():
    """The REST API's user_options skip the form: the service's check is the one."""
    s = DatasetSpawner()
    s.refuse_submit = ApiError(403, "team vision may not read dataset genomes (it is team "
                                    "bio's and not shared with vision: ask a lead of bio)",
                               field="datasets")
    s.user_options = {"team": "vision", "pool": "h200", "gpus": 1, "datasets": ["genomes"]}
    with pytest.raises(web.HTTPError) as e:
        asyncio.run(s.admit())
    assert e.value.status_code == 403
    assert "datasets: team vision may not read dataset genomes" in e.value.log_message
    assert s.workload_id is None


@pytest.mark.parametrize("value, names", [
    (None, ()), ([], ()), ([""], ()), ("imagenet", ("imagenet",)),
    (["imagenet", "census"], ("imagenet", "census")),
])
def test_the_names_a_spawn_asks_for(value, names):
    assert parse_datasets({} if value is None else {"datasets": value}) == names


def test_twice_the_same_dataset_is_refused():
    with pytest.raises(OptionsError, match="more than once"):
        parse_datasets({"datasets": ["imagenet", "imagenet"]})


def test_readable_is_the_teams_own_and_those_shared_with_them():
    assert [d["name"] for d in readable(EVERY, ["nlp"])] == ["imagenet"]
    assert [d["name"] for d in readable(EVERY, ["bio", "vision"])] == \
        ["census", "genomes", "imagenet"]
    assert readable(EVERY, []) == []


# ---- Kubernetes: the jobs' read-only volumes -----------------------------------
def test_a_kubernetes_servers_datasets_are_read_only_subpaths_of_the_jobs_claims():
    async def go():
        s = make_spawner()
        s.workspace_claim, s.dataset_claim = "gpuhub-workspaces", "gpuhub-datasets"
        admitted(s, GpuRequest("ml", "a100", 1), workload("a100", 1))
        s.datasets = (("imagenet", "/home/alice/imagenet"), ("census", "/datasets-store/census"))
        s.apply_datasets(s.datasets)
        first = await manifest(s)  # validated against the Kubernetes schema
        s.clear_state()  # the next spawn, without datasets, gets none of them
        admitted(s, GpuRequest("ml", "a100", 1), workload("a100", 1))
        return first, await manifest(s)

    pod, next_pod = run(go())
    mounts = {m["mountPath"]: m for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/datasets/imagenet"] == {"name": "gpuhub-workspaces", "mountPath":
                                            "/datasets/imagenet", "readOnly": True,
                                            "subPath": "alice/imagenet"}
    assert mounts["/datasets/census"]["subPath"] == "census"
    assert mounts["/datasets/census"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["gpuhub-datasets"]["persistentVolumeClaim"] == {
        "claimName": "gpuhub-datasets", "readOnly": True}
    assert volumes["gpuhub-workspaces"]["persistentVolumeClaim"]["readOnly"] is True
    assert not any(v["name"].startswith("gpuhub-") for v in next_pod["spec"].get("volumes", []))


def test_a_kubernetes_dataset_on_no_claim_the_pods_mount_fails_the_start_clearly():
    async def go():
        s = make_spawner()
        with pytest.raises(web.HTTPError) as e:
            s.apply_datasets((("imagenet", "/srv/elsewhere"),))
        return e.value

    err = run(go())
    assert err.status_code == 500 and "is on no volume" in err.log_message
