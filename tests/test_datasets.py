"""Datasets without a hub: the rules (vocab/datasets.py), the read-only mount
in a mount namespace of the job's own (isolation/dataset_mounts.py, run as
root as in CI), the pod's volumes on Kubernetes, what ``gpuhub dataset``
prints. The users' view on a real hub is tests/test_datasets_e2e.py."""
from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import pytest

from gpuspawner.backends.kubernetes.manifests import dataset_mounts, job_manifest
from gpuspawner.cli.dataset import create_body, format_datasets
from gpuspawner.cli.main import main
from gpuspawner.isolation import dataset_mounts as mounts
from gpuspawner.service.datasets.page import node_labels_typed
from gpuspawner.isolation.accounts import isolating
from gpuspawner.vocab import datasets as rules
from gpuspawner.vocab.specs import SpecError, parse_job
from test_kube_backend import SETTINGS, spec, valid


# ---- the rules ---------------------------------------------------------------------

@pytest.mark.parametrize("name, ok", [
    ("imagenet", True), ("coco-2017", True), ("a", True), ("x" * 64, True),
    ("x" * 65, False), ("ImageNet", False), ("-coco", False), ("coco-", False),
    ("co_co", False), ("../etc", False), ("", False), (3, False)])
def test_a_dataset_name_is_a_slug(name, ok):
    if ok:
        assert rules.parse_name(name) == name
    else:
        with pytest.raises(SpecError, match="is not a dataset name"):
            rules.parse_name(name)


@pytest.mark.parametrize("value, message", [
    ("imagenet", "must be a list"), (["a", "a"], "names a more than once"),
    ([f"d{i}" for i in range(17)], "at most 16"), (["Bad"], "is not a dataset name")])
def test_a_jobs_datasets_field_names_the_problem(value, message):
    with pytest.raises(SpecError, match=message) as e:
        parse_job({"command": ["true"], "pool": "p", "datasets": value})
    assert e.value.field == "datasets"


def test_a_jobs_datasets_are_kept_with_its_spec():
    job = parse_job({"command": ["true"], "pool": "p", "datasets": ["coco", "imagenet"]})
    assert job.datasets == ("coco", "imagenet") and job.stored()["datasets"] == ["coco", "imagenet"]
    assert "datasets" not in parse_job({"command": ["true"], "pool": "p"}).stored()


@pytest.mark.parametrize("team, owner, shared, readable", [
    ("vision", "vision", [], True),       # its own team
    ("nlp", "vision", ["nlp"], True),     # shared with
    ("bio", "vision", ["nlp"], False),    # not shared with
    ("nlp", "vision", [], False)])
def test_a_workload_reads_a_dataset_of_its_team_or_one_shared_with_it(team, owner, shared,
                                                                         readable):
    assert rules.may_read(team, owner, shared) is readable


@pytest.mark.parametrize("admin, teams, expected", [
    (True, [], True), (False, ["bio"], False), (False, ["bio", "nlp"], True),
    (False, ["vision"], True)])
def test_a_user_sees_the_datasets_one_of_their_teams_may_read(admin, teams, expected):
    assert rules.sees(admin, teams, "vision", ["nlp"]) is expected


@pytest.mark.parametrize("admin, leads, expected", [
    (True, [], True), (False, ["vision"], True), (False, ["nlp"], False), (False, [], False)])
def test_only_a_lead_of_its_team_or_an_admin_manages_a_dataset(admin, leads, expected):
    assert rules.may_manage(admin, leads, "vision") is expected


@pytest.mark.parametrize("allowed, pool, refused", [
    ([], "us", False), (["eu"], "eu", False), (["eu"], "us", True),
    (["eu", "eu-2"], "eu-2", False), (["eu", "eu-2"], "us", True)])
def test_residency_allows_the_datasets_pools_only_and_says_which(allowed, pool, refused):
    why = rules.residency_refusal("census", allowed, pool)
    assert (why is not None) is refused
    if refused:
        assert "census" in why and ", ".join(allowed) in why and pool in why


@pytest.mark.parametrize("value, known, result", [
    (None, ["eu"], []), ([], ["eu"], []), (["eu", "eu"], ["eu", "us"], ["eu"])])
def test_residency_pools_are_known_pools(value, known, result):
    assert rules.parse_pools(value, known) == result


@pytest.mark.parametrize("value, message", [
    (["region=eu"], "must be an object of node labels"),
    ({"region": 3}, "3 (label region) is not a node label value"),
    ({"region": "e u"}, "'e u' (label region) is not a node label value"),
    ({"region": "x" * 64}, "is not a node label value"),
    ({"-region": "eu"}, "'-region' is not a node label name"),
    ({"a/b/c": "eu"}, "'a/b/c' is not a node label name"),
    ({"": "eu"}, "'' is not a node label name"),
    ({f"k{i}": "v" for i in range(17)}, "at most 16 node labels")])
def test_a_bad_residency_node_label_is_named(value, message):
    with pytest.raises(SpecError, match=re.escape(message)) as e:
        rules.parse_node_labels(value)
    assert e.value.field == "node_labels" and e.value.status == 400


@pytest.mark.parametrize("value, labels", [
    (None, {}), ({}, {}), ({"region": "eu"}, {"region": "eu"}),
    ({"topology.kubernetes.io/region": "eu-west-1", "gpu": ""},
     {"gpu": "", "topology.kubernetes.io/region": "eu-west-1"})])
def test_residency_node_labels_are_spelled_as_kubernetes_labels(value, labels):
    assert rules.parse_node_labels(value) == labels


def test_an_unknown_residency_pool_is_named():
    with pytest.raises(SpecError, match="unknown pool 'mars'; known pools: eu, us"):
        rules.parse_pools(["mars"], ["us", "eu"])


@pytest.mark.parametrize("path, root", [
    ("/srv/data/imagenet", "/srv/data"), ("/srv/data", "/srv/data"), ("/srv/database", None),
    ("/etc", None), ("/home/alice/x", "/home/alice")])
def test_a_folder_is_allowed_only_under_an_allowed_root(path, root):
    assert rules.within(path, ["/srv/data", "/home/alice", ""]) == root


# ---- the mount ------------------------------------------------------------------------

needs_root = pytest.mark.skipif(not isolating(), reason="mount namespaces need root (CI runs "
                                                        "the tests as root)")
PROBE = r"""
import errno, os, sys
def attempt(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("READ", open(sys.argv[1] + "/x/labels.txt").read())
print("WRITE", attempt(lambda: open(sys.argv[1] + "/x/labels.txt", "a")))
print("CREATE", attempt(lambda: open(sys.argv[1] + "/x/new.txt", "w")))
print("BESIDE", attempt(lambda: os.mkdir(sys.argv[1] + "/y")))
print("LISTED", sorted(os.listdir(sys.argv[1])))
"""


@needs_root
def test_a_mounted_dataset_is_readable_and_not_writable_even_by_root(tmp_path):
    data = tmp_path / "imagenet"
    data.mkdir()
    (data / "labels.txt").write_text("cat dog")
    root = str(tmp_path / "datasets")
    mounts.ensure_root(root)
    folder = os.path.realpath(data)
    out = subprocess.run([sys.executable, "-c", PROBE, root], capture_output=True, text=True,
                         preexec_fn=mounts.mount_step([("x", folder)], root), check=True).stdout
    assert "READ cat dog" in out and "WRITE EROFS" in out and "CREATE EROFS" in out
    assert "BESIDE EROFS" in out and "LISTED ['x']" in out
    assert os.listdir(root) == [] and "datasets" not in open("/proc/self/mountinfo").read()


@needs_root
def test_a_link_put_in_place_of_the_registered_folder_is_not_mounted(tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    registered = tmp_path / "imagenet"
    registered.symlink_to(secret)  # the folder swapped for a link after its registration
    with pytest.raises(mounts.MountError, match="no longer that folder"):
        mounts.check([("x", str(registered))])
    with pytest.raises(mounts.MountError) as e:
        mounts.check([("x", str(tmp_path / "gone"))])
    assert e.value.errno == errno.ENOENT


@pytest.mark.parametrize("value", ["x", "X=/a", "x=relative", "=/a"])
def test_the_runners_dataset_option_is_name_and_absolute_path(value):
    with pytest.raises(ValueError, match="NAME=/absolute/path"):
        mounts.parse([value])


# ---- Kubernetes -------------------------------------------------------------------------

def test_a_pod_sees_its_datasets_read_only_from_the_claims_they_are_on():
    s = replace(SETTINGS, dataset_claim="gpuhub-datasets", dataset_mount="/srv/datasets")
    job = valid(job_manifest(spec(datasets=(("imagenet", "/home/alice/data/imagenet"),
                                            ("census", "/srv/datasets/census"))), s))
    pod = job["spec"]["template"]["spec"]
    [c] = pod["containers"]
    by_path = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert by_path["/datasets/imagenet"] == {"name": "workspaces", "readOnly": True,
                                             "mountPath": "/datasets/imagenet",
                                             "subPath": "alice/data/imagenet"}
    assert by_path["/datasets/census"]["name"] == "datasets"
    assert by_path["/datasets/census"]["readOnly"] and by_path["/datasets/census"]["subPath"] == "census"
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"]}
    assert claims["datasets"] == {"claimName": "gpuhub-datasets", "readOnly": True}
    assert {"name": "GPUHUB_DATASETS_DIR", "value": "/datasets"} in c["env"]


def test_a_dataset_on_no_claim_the_jobs_mount_is_refused_by_name():
    with pytest.raises(ValueError, match="dataset census .* is on no volume"):
        dataset_mounts(spec(datasets=(("census", "/srv/elsewhere/census"),)), SETTINGS)
    [c] = job_manifest(spec(), SETTINGS)["spec"]["template"]["spec"]["containers"]
    assert not any(m["mountPath"].startswith("/datasets") for m in c["volumeMounts"])
    assert "GPUHUB_DATASETS_DIR" not in {e["name"] for e in c["env"]}


# ---- the admin panel's form -----------------------------------------------------------

@pytest.mark.parametrize("typed, labels, error", [
    ("", {}, None), ("region=eu", {"region": "eu"}, None),
    ("region=eu, zone=a\ngpu=", {"region": "eu", "zone": "a", "gpu": ""}, None),
    ("region", None, "'region': say KEY=VALUE"),
    ("region=eu,region=us", None, "label region given twice (eu and us)")])
def test_the_forms_node_labels_are_key_value_pairs(typed, labels, error):
    if error is None:
        assert node_labels_typed(typed) == labels
    else:
        with pytest.raises(SpecError, match=re.escape(error)) as e:
            node_labels_typed(typed)
        assert e.value.field == "node_labels"


# ---- the command line ----------------------------------------------------------------------

def test_gpuhub_dataset_create_sends_an_absolute_path_and_what_was_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = SimpleNamespace(name="coco", path="data", team=None, pool=["eu"], share=["nlp"],
                           node_label=["region=eu", "disk=nvme"])
    assert create_body(args) == {"name": "coco", "path": str(tmp_path / "data"),
                                 "pools": ["eu"], "shared_with": ["nlp"],
                                 "node_labels": {"region": "eu", "disk": "nvme"}}


@pytest.mark.parametrize("given, message", [
    (["region"], "--node-label 'region': say KEY=VALUE"),
    (["=eu"], "--node-label '=eu': say KEY=VALUE"),
    (["region=eu", "region=us"], "--node-label region given twice (eu and us)")])
def test_gpuhub_dataset_create_says_what_is_wrong_with_a_node_label(given, message, capsys):
    args = ["dataset", "create", "coco", "/srv/coco", "--url", "http://127.0.0.1:9",
            *[a for v in given for a in ("--node-label", v)]]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_gpuhub_dataset_ls_shows_team_size_shares_and_residency():
    text = format_datasets([{"name": "coco", "team": "vision", "size_bytes": 3 << 30,
                             "shared_with": ["nlp", "bio"], "pools": [], "path": "/srv/coco",
                             "node_labels": {}},
                            {"name": "census", "team": "nlp", "size_bytes": None,
                             "shared_with": [], "pools": ["eu"], "path": "/srv/census",
                             "node_labels": {"region": "eu", "disk": "nvme"}}])
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "TEAM", "SIZE", "SHARED", "WITH", "POOLS", "NODES",
                                "PATH"]
    assert lines[1].split() == ["coco", "vision", "3GiB", "nlp,bio", "any", "any", "/srv/coco"]
    assert lines[2].split() == ["census", "nlp", "-", "-", "eu", "disk=nvme,region=eu",
                                "/srv/census"]
    assert format_datasets([]) == "no datasets you may read"
