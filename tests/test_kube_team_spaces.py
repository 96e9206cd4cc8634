"""Team spaces on Kubernetes (docs/storage.md): a ReadWriteMany claim per team,
mounted in the team's jobs at ``team_space_mount`` as ``$GPUHUB_TEAM_DIR``;
the manifests are checked against the real Kubernetes schema."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gpuspawner.backends.kubernetes.manifests import job_manifest, team_claim, team_space
from gpuspawner.scheduler.model import Team
from test_kube_backend import SETTINGS, spec, valid

TEAM_SPACES = replace(SETTINGS, team_space_claim="gpuhub-team-{team}", team_space_class="cephfs",
                      team_namespaces=True)


def mounts(job: dict) -> dict[str, str]:
    pod = job["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])}
    return {claims[m["name"]]: m["mountPath"] for m in pod["containers"][0].get("volumeMounts", [])}


def env(job: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_a_job_mounts_its_teams_space_and_is_told_where():
    job = valid(job_manifest(spec(team="vision"), TEAM_SPACES))
    assert mounts(job)["gpuhub-team-vision"] == "/team"
    assert env(job)["GPUHUB_TEAM_DIR"] == "/team"


def test_a_job_of_another_team_mounts_that_teams_space_only():
    job = valid(job_manifest(spec(team="nlp"), TEAM_SPACES))
    assert "gpuhub-team-nlp" in mounts(job) and "gpuhub-team-vision" not in mounts(job)


def test_without_a_claim_there_is_no_team_space():
    job = valid(job_manifest(spec(team="vision"), SETTINGS))
    assert not any(c.startswith("gpuhub-team") for c in mounts(job))
    assert "GPUHUB_TEAM_DIR" not in env(job)


@pytest.mark.parametrize("team", ["vision", "Vision_Lab", "a" * 70, "x.y"])
def test_every_team_name_gives_a_valid_claim_name_of_its_own(team):
    name = team_claim(team, TEAM_SPACES)
    assert re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name) and len(name) <= 63
    assert name != team_claim(team.swapcase() + "z", TEAM_SPACES)


def test_the_claim_is_readwritemany_in_the_teams_namespace_sized_by_its_quota():
    claim = valid(team_space(Team("vision", {}), TEAM_SPACES, "200G"))
    assert claim["metadata"]["namespace"] == "gpuhub-jobs-vision"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "200G"
    assert claim["spec"]["storageClassName"] == "cephfs"
    default = team_space(Team("nlp", {}), TEAM_SPACES)
    assert default["spec"]["resources"]["requests"]["storage"] == "100Gi"
