"""The Helm chart (helm/gpuhub), rendered and linted by real Helm (its Go SDK,
through helm-python-sdk), every manifest validated against the Kubernetes
OpenAPI schema, and the hub config it gives z2jh executed.

The Zero to JupyterHub dependency cannot be fetched here (no network but the
package registries), so charts/ stays empty: manifests are rendered with
``jupyterhub.enabled=false``; the values GPU Hub hands z2jh are checked by
running the hub config they produce (``jupyterhub.hub.extraConfig.gpuhub``)
against a traitlets Config prepared the way z2jh's jupyterhub_config.py
prepares it.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import types
from functools import lru_cache

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from jupyterhub.services.auth import HubOAuth
from jupyterhub.services.service import Service
from jupyterhub.utils import url_path_join
from traitlets.config import Config

from gpuspawner.hub import config as gpuhub_config
from gpuspawner.hub.chart import ChartConfigError
from gpuspawner.service.api.routes import API_ROUTES, route_regex
from gpuspawner.service.app import GpuHubService

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CHART = os.path.join(ROOT, "helm", "gpuhub")
K8S_VERSION = kubernetes_validate.latest_version()
NAMESPACE = "gpuhub"
RELEASE = "gpuhub"
HEALTH = "/services/gpuhub/api/v1/health"

# The least a real install needs: the database Secret; the z2jh dependency
# is not here to render.
BASE = {"jupyterhub": {"enabled": False}, "scheduler": {"database": {"secretName": "gpuhub-db"}}}
# What gpuspawner/backends/kubernetes/backend.py calls: in the jobs' namespaces ...
BACKEND_VERBS = {
    ("batch", "jobs"): {"create", "delete"},
    ("apps", "deployments"): {"create", "delete"},
    ("", "services"): {"create", "delete"},
    ("", "configmaps"): {"create", "delete"},
    ("", "pods/log"): {"get"},
}
# ... and cluster-wide, read-only (one labelled listing, then a watch, and the nodes).
CLUSTER_VERBS = {
    ("", "nodes"): {"list", "watch"},
    ("batch", "jobs"): {"list", "watch"},
    ("apps", "deployments"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},
}


def merged(*overrides: dict) -> dict:
    out = copy.deepcopy(BASE)
    for o in overrides:
        _merge(out, o)
    return out


def _merge(into: dict, other: dict) -> None:
    for k, v in other.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


@lru_cache(maxsize=None)
def _render(values_json: str) -> tuple[tuple[str, str], ...]:
    with helm.Chart.load(CHART) as chart:
        return tuple(sorted(chart.render(json.loads(values_json), name=RELEASE,
                                         namespace=NAMESPACE).items()))


def render(values: dict) -> dict[str, str]:
    return dict(_render(json.dumps(values, sort_keys=True)))


def manifests(values: dict) -> list[dict]:
    out = []
    for path, text in render(values).items():
        if path.endswith("NOTES.txt"):
            continue
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict]) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict) -> dict[str, dict]:
    return {e["name"]: e for e in c["env"]}


VALUE_SETS = {
    "defaults": {},
    "local-backend": {"backend": {"type": "local"}},
    "team-namespaces": {"backend": {"namespace": "gpuhub-jobs", "teams": ["vision", "nlp"]}},
    "persistent-no-netpol": {"scheduler": {"persistence": {"enabled": True, "storageClass": "fast",
                                                           "size": "50Gi"}},
                             "networkPolicy": {"enabled": False}},
    "paused-configured": {
        "scheduler": {
            "replicas": 0, "publicUrl": "https://gpu.example.com/",
            "config": {"GpuHubService": {"teams": {"vision": {"quotas": {"a100": {"nominal": 4}}}},
                                         "gpu_hour_prices": {"a100": 2.4},
                                         "log_level": "INFO"},
                       "KubernetesJobs": {"checkpoint_claim": "gpuhub-checkpoints"}},
            "extraVolumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}],
            "extraVolumeMounts": [{"name": "home", "mountPath": "/home"}],
            "extraConfig": "c.GpuHubService.preemption_delay = 120.0\n",
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "nodeSelector": {"node-role.kubernetes.io/control": "true"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra",
                             "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "registry"}],
        },
        "serviceAccount": {"annotations": {"example.com/role": "gpuhub"}},
        "networkPolicy": {"extraIngressFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]},
    },
    # docs/deploy-kubernetes.md, "Model deployments"
    "model-deployments": {"scheduler": {
        "extraVolumes": [{"name": "workspaces",
                          "persistentVolumeClaim": {"claimName": "gpuhub-workspaces"}}],
        "extraVolumeMounts": [{"name": "workspaces", "mountPath": "/home"}],
        "config": {"GpuHubService": {"workspace_root": "/home/{username}"},
                   "KubernetesJobs": {"workspace_claim": "gpuhub-workspaces",
                                      "workspace_mount": "/home"}}}},
}


# ---- every manifest of every value set is valid Kubernetes ----------------------
@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_manifest_validates_against_kubernetes(name):
    docs = manifests(merged(VALUE_SETS[name]))
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] in (NAMESPACE, "gpuhub-jobs-vision",
                                                    "gpuhub-jobs-nlp")
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuhub"
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("Deployment") == 1 and kinds.count("Service") == 1
    assert "Secret" not in kinds  # secrets are the admin's, referenced by name
    assert "Ingress" not in kinds  # the service is reached through JupyterHub's proxy
    if VALUE_SETS[name].get("backend", {}).get("type") == "local":
        assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    else:
        assert len(by_kind(docs, "ClusterRole")) == len(by_kind(docs, "ClusterRoleBinding")) == 1


@pytest.mark.parametrize("name", VALUE_SETS)
def test_chart_lints_clean(name):
    report = helm.lint(CHART, merged(VALUE_SETS[name]), kube_version=f"v{K8S_VERSION}.0")
    assert report["errors"] == [], report
    # The only warning: z2jh is not fetched into charts/ here (helm dependency update).
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert [m["error"] for m in problems] == ["chart directory is missing these dependencies: jupyterhub"]


def test_lint_finds_a_broken_template(tmp_path):
    """The lint above can fail: a template with a syntax error is an error."""
    import shutil
    broken = tmp_path / "gpuhub"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("{{ if }}\n")
    report = helm.lint(str(broken), BASE)
    assert report["errors"], report


# ---- secrets are referenced, never inlined ------------------------------------------
def test_database_url_and_hub_token_come_from_secrets():
    docs = manifests(merged())
    env = env_of(container(docs))
    assert env["GPUHUB_DB_URL"] == {"name": "GPUHUB_DB_URL", "valueFrom": {
        "secretKeyRef": {"name": "gpuhub-db", "key": "url"}}}
    # The token z2jh generates for hub.services.gpuhub, in its Secret "hub".
    assert env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hub", "key": "hub.services.gpuhub.apiToken"}
    with helm.Chart.load(CHART) as chart:
        defaults = chart.values
    assert "gpuhub" in defaults["jupyterhub"]["hub"]["services"]
    assert "gpuhub-spawner" in defaults["jupyterhub"]["hub"]["services"]
    for e in env.values():
        assert "value" in e or "valueFrom" in e
        assert "postgresql" not in json.dumps(e)


def test_other_secret_names_are_used():
    docs = manifests(merged({"scheduler": {
        "database": {"secretName": "pg-app", "secretKey": "uri"},
        "hubApiToken": {"secretName": "my-hub-tokens", "secretKey": "gpuhub"}}}))
    env = env_of(container(docs))
    assert env["GPUHUB_DB_URL"]["valueFrom"]["secretKeyRef"] == {"name": "pg-app", "key": "uri"}
    assert env["JUPYTERHUB_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "my-hub-tokens", "key": "gpuhub"}


# ---- RBAC: exactly what the kubernetes backend needs, where it needs it -------------
def rules(role: dict) -> dict:
    out = {}
    for r in role["rules"]:
        for group in r["apiGroups"]:
            for res in r["resources"]:
                assert (group, res) not in out, f"{group}/{res} twice"
                out[(group, res)] = set(r["verbs"])
                assert "*" not in r["verbs"] and "resourceNames" not in r
    return out


def test_rbac_grants_the_backend_exactly_what_it_calls():
    docs = manifests(merged())
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE  # jobs run in the release's namespace
    assert rules(role) == BACKEND_VERBS
    cluster_role = one(docs, "ClusterRole")
    assert rules(cluster_role) == CLUSTER_VERBS
    sa = one(docs, "ServiceAccount")
    subject = [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    binding = one(docs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == subject
    cluster_binding = one(docs, "ClusterRoleBinding")
    assert cluster_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                          "kind": "ClusterRole",
                                          "name": cluster_role["metadata"]["name"]}
    assert cluster_binding["subjects"] == subject
    # cluster-wide names carry the namespace: two releases do not collide
    assert NAMESPACE in cluster_role["metadata"]["name"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    settings = json.loads(config_files(docs)["settings.json"])
    assert settings["GpuHubService"]["backend"] == "kubernetes"
    assert settings["KubernetesJobs"]["namespace"] == NAMESPACE
    assert settings["KubernetesJobs"]["team_namespaces"] is False
    assert settings["KubernetesJobs"]["image"] == "gpuhub/runner:0.1.0"


def api_calls() -> set[tuple[str, str, str, str]]:
    """(scope, API group, resource, verb) of every Kubernetes API call of the
    kubernetes backend, read from its API layer's source (its list calls
    also watch, with ``watch=True``)."""
    import re

    from gpuspawner.backends.kubernetes import api
    source = open(api.__file__).read()
    groups = {"_batch": "batch", "_apps": "apps", "_core": ""}
    verbs = {"create": "create", "delete": "delete", "list": "list", "read": "get",
             "patch": "patch", "replace": "update"}
    plural = {"job": "jobs", "service": "services", "pod": "pods", "pod_log": "pods/log",
              "node": "nodes", "deployment": "deployments", "config_map": "configmaps"}
    out = set()
    for api, verb, namespaced, kind, everywhere in re.findall(
            r"self\.(_batch|_apps|_core)\.(create|delete|list|read|patch|replace)_(namespaced_)?"
            r"([a-z_]+?)(_for_all_namespaces)?\(", source):
        scope = "namespace" if namespaced else "cluster"
        out.add((scope, groups[api], plural[kind], verbs[verb]))
    assert out, "no API call found in gpuspawner/backends/kubernetes/api.py"
    if "watch=True" in source:
        out |= {(scope, group, res, "watch") for scope, group, res, verb in out if verb == "list"}
    return out


def test_rbac_matches_the_backends_api_calls():
    """Every call the backend makes is granted, and nothing else is."""
    docs = manifests(merged())
    granted = {("namespace", g, r, v) for (g, r), vs in rules(one(docs, "Role")).items()
               for v in vs}
    granted |= {("cluster", g, r, v) for (g, r), vs in rules(one(docs, "ClusterRole")).items()
                for v in vs}
    assert granted == api_calls()


def test_rbac_per_team_namespace():
    values = merged(VALUE_SETS["team-namespaces"])
    docs = manifests(values)
    roles = {r["metadata"]["namespace"]: r for r in by_kind(docs, "Role")}
    bindings = {b["metadata"]["namespace"]: b for b in by_kind(docs, "RoleBinding")}
    # the backend's own naming of team namespaces
    from gpuspawner.backends.kubernetes.manifests import KubeSettings, namespace_for
    settings = json.loads(config_files(docs)["settings.json"])["KubernetesJobs"]
    assert settings["team_namespaces"] is True and settings["hub_namespace"] == NAMESPACE
    ks = KubeSettings(namespace=settings["namespace"], image="x", pools={},
                      priority_class_names={}, team_namespaces=True)
    expected = {namespace_for(t, ks) for t in values["backend"]["teams"]}
    assert set(roles) == set(bindings) == expected == {"gpuhub-jobs-vision", "gpuhub-jobs-nlp"}
    for ns in roles:
        assert rules(roles[ns]) == BACKEND_VERBS
        # The service's account lives in the release's namespace.
        assert bindings[ns]["subjects"][0]["namespace"] == NAMESPACE
    assert rules(one(docs, "ClusterRole")) == CLUSTER_VERBS
    assert "gpuhub-jobs-vision, gpuhub-jobs-nlp" in render(values)["gpuhub/templates/NOTES.txt"]


def test_jobs_share_the_notebooks_pools():
    pools = {"a100-sxm4-80gb": {"resource": "nvidia.com/gpu",
                                "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}
    docs = manifests(merged({"jupyterhub": {"custom": {"gpuhub": {"gpuPools": pools}}},
                             "backend": {"priorityClassNames": {"batch": "gpuhub-batch"}},
                             "scheduler": {"config": {"KubernetesJobs": {
                                 "checkpoint_claim": "ckpt", "namespace": "ignored"}}}}))
    jobs = json.loads(config_files(docs)["settings.json"])["KubernetesJobs"]
    assert jobs["pools"] == pools
    assert jobs["priority_class_names"] == {"batch": "gpuhub-batch"}
    assert jobs["checkpoint_claim"] == "ckpt"
    # where jobs run is the chart's (backend.namespace), since its RBAC follows it
    assert jobs["namespace"] == NAMESPACE == one(docs, "Role")["metadata"]["namespace"]


def test_local_backend_gets_no_rbac_and_no_token():
    docs = manifests(merged({"backend": {"type": "local"}}))
    assert not by_kind(docs, "Role") and not by_kind(docs, "RoleBinding")
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    settings = json.loads(config_files(docs)["settings.json"])
    assert settings["GpuHubService"]["backend"] == "local" and "KubernetesJobs" not in settings


def test_rbac_can_be_left_to_the_admin():
    docs = manifests(merged({"rbac": {"create": False}, "serviceAccount": {"create": False,
                                                                         "name": "existing"}}))
    assert not by_kind(docs, "Role") and not by_kind(docs, "ClusterRole")
    assert not by_kind(docs, "ServiceAccount")
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"


# ---- the Deployment: probes, port, security, storage ---------------------------------
def test_probes_point_at_the_health_endpoint_the_service_serves():
    docs = manifests(merged())
    c = container(docs)
    assert c["ports"] == [{"name": "http", "containerPort": 10101, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": HEALTH, "port": "http"}, probe
    # ... and the service answers that path (its routes, unauthenticated /health).
    env = env_of(c)
    prefix = env["JUPYTERHUB_SERVICE_PREFIX"]["value"]
    health = [p for p, _ in API_ROUTES if p == "/health"]
    assert health and HEALTH == prefix + "api/v1" + route_regex(health[0])
    svc = one(docs, "Service")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 10101, "targetPort": "http",
                                     "protocol": "TCP"}]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert c["command"] == ["python3", "-m", "gpuspawner.service", "-f",
                            "/etc/gpuhub/gpuhub_config.py"]


def test_hub_base_url_moves_the_probes_and_the_prefix():
    docs = manifests(merged({"scheduler": {"hubBaseUrl": "/jupyter/"}}))
    c = container(docs)
    assert c["readinessProbe"]["httpGet"]["path"] == "/jupyter" + HEALTH
    env = env_of(c)
    assert env["JUPYTERHUB_SERVICE_PREFIX"]["value"] == "/jupyter/services/gpuhub/"
    assert env["JUPYTERHUB_OAUTH_CALLBACK_URL"]["value"] == "/jupyter/services/gpuhub/oauth_callback"


def test_pod_runs_unprivileged_with_resources():
    docs = manifests(merged())
    dep = one(docs, "Deployment")
    assert dep["spec"]["strategy"] == {"type": "Recreate"}  # never two schedulers
    assert dep["spec"]["replicas"] == 1
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = container(docs)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True
    res = container(docs)["resources"]
    assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {}}
    mounts = {m["mountPath"]: m["name"] for m in container(docs)["volumeMounts"]}
    assert mounts["/var/lib/gpuhub"] == "data" and mounts["/tmp"] == "tmp"
    # the pod may reach the hub's API through z2jh's NetworkPolicy
    assert dep["spec"]["template"]["metadata"]["labels"][
        "hub.jupyter.org/network-access-hub"] == "true"


def test_persistence_uses_a_kept_pvc():
    docs = manifests(merged(VALUE_SETS["persistent-no-netpol"]))
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert not by_kind(docs, "NetworkPolicy")


def test_network_policy_admits_hub_and_proxy_only():
    docs = manifests(merged())
    np = one(docs, "NetworkPolicy")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    [rule] = np["spec"]["ingress"]
    [peer] = rule["from"]
    assert peer["podSelector"]["matchExpressions"] == [
        {"key": "component", "operator": "In", "values": ["hub", "proxy", "autohttps"]}]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    extra = one(manifests(merged(VALUE_SETS["paused-configured"])), "NetworkPolicy")
    assert len(extra["spec"]["ingress"][0]["from"]) == 2


def test_config_change_rolls_the_pod():
    a = one(manifests(merged()), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    b = one(manifests(merged({"scheduler": {"config": {"GpuHubService": {"cycle_interval": 2.0}}}})),
            "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert a["checksum/config"] != b["checksum/config"]


# ---- the service's environment is what HubOAuth and the hub expect ---------------
def test_service_environment_matches_what_the_hub_registers(monkeypatch):
    docs = manifests(merged())
    env = {k: v["value"] for k, v in env_of(container(docs)).items() if "value" in v}
    for k in list(os.environ):
        if k.startswith("JUPYTERHUB_"):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "token-from-the-secret")
    auth = HubOAuth()
    # The hub's record of the service "gpuhub" (hub.services.gpuhub).
    svc = Service(name="gpuhub", url="http://gpuhub-service:10101", base_url="/")
    assert auth.oauth_client_id == svc.oauth_client_id == "service-gpuhub"
    assert auth.oauth_redirect_uri == svc.host + url_path_join(svc.prefix, "oauth_callback")
    # (HubOAuth.base_url reads this variable when jupyterhub is imported.)
    assert env["JUPYTERHUB_SERVICE_PREFIX"] == svc.prefix
    assert auth.api_url == "http://hub:8081/hub/api"
    assert auth.hub_prefix == "/hub/"
    assert auth.access_scopes == {gpuhub_config.SERVICE_ACCESS}
    assert auth.oauth_authorization_url == "/hub/api/oauth2/authorize"  # same origin
    assert env["JUPYTERHUB_SERVICE_URL"] == "http://0.0.0.0:10101"


# ---- the service's config (ConfigMap) loads in the service ---------------------------
def config_files(docs: list[dict]) -> dict[str, str]:
    return one(docs, "ConfigMap")["data"]


def load_service_config(docs, tmp_path) -> GpuHubService:
    for name, text in config_files(docs).items():
        (tmp_path / name).write_text(text)
    app = GpuHubService()
    app.load_config_file(str(tmp_path / "gpuhub_config.py"))
    return app


def test_service_config_loads_with_the_values(tmp_path):
    docs = manifests(merged(VALUE_SETS["paused-configured"]))
    app = load_service_config(docs, tmp_path)
    assert app.data_dir == "/var/lib/gpuhub"
    assert app.teams == {"vision": {"quotas": {"a100": {"nominal": 4}}}}
    assert app.gpu_hour_prices == {"a100": 2.4}
    assert app.preemption_delay == 120.0  # scheduler.extraConfig
    assert app.log_level == 20  # INFO, as docs/deploy-kubernetes.md suggests
    assert app.backend == "kubernetes"
    # every option given is one the service has
    from gpuspawner.backends.kubernetes.config import KubernetesJobs
    classes = {"GpuHubService": GpuHubService, "KubernetesJobs": KubernetesJobs}
    for section, traits in json.loads(config_files(docs)["settings.json"]).items():
        known = set(classes[section].class_trait_names(config=True))
        assert set(traits) <= known, set(traits) - known
    jobs = KubernetesJobs(parent=app)
    assert jobs.namespace == NAMESPACE and jobs.hub_namespace == NAMESPACE
    assert jobs.image == "gpuhub/runner:0.1.0"
    dep = one(docs, "Deployment")["spec"]
    assert dep["replicas"] == 0
    assert env_of(container(docs))["JUPYTERHUB_PUBLIC_URL"]["value"] == "https://gpu.example.com/"


def test_service_config_default_grace_period(tmp_path):
    app = load_service_config(manifests(merged()), tmp_path)
    assert app.default_grace_period == 30
    assert app.teams == {}


# ---- bad values fail at install with a message naming the value ---------------------
@pytest.mark.parametrize("values,path,says", [
    pytest.param({"scheduler": {"database": {"secretName": ""}}}, "/scheduler/database/secretName",
                 "minLength", id="no-database-secret"),
    pytest.param({"scheduler": {"replicas": -1}}, "/scheduler/replicas", "minimum",
                 id="negative-replicas"),
    pytest.param({"scheduler": {"replicas": 2}}, "/scheduler/replicas", "maximum",
                 id="two-schedulers"),
    pytest.param({"scheduler": {"replicas": "one"}}, "/scheduler/replicas", "integer",
                 id="replicas-not-a-number"),
    pytest.param({"backend": {"type": "slurm"}}, "/backend/type", "kubernetes",
                 id="unknown-backend"),
    pytest.param({"backend": {"teams": ["Team_Vision"]}}, "/backend/teams/0",
                 "pattern", id="bad-team-namespace"),
    pytest.param({"backend": {"namespace": "Jobs!"}}, "/backend/namespace", "pattern",
                 id="bad-jobs-namespace"),
    pytest.param({"scheduler": {"replica": 1}}, "/scheduler", "replica", id="typo"),
    pytest.param({"scheduler": {"persistence": {"size": "lots"}}}, "/scheduler/persistence/size",
                 "pattern", id="bad-size"),
    pytest.param({"scheduler": {"image": {"tag": ""}}}, "/scheduler/image/tag", "minLength",
                 id="empty-tag"),
    pytest.param({"jupyterhub": {"custom": {"gpuhub": {"gpuPools": {"a100": {
        "node_selector": {"gpu": "a100"}}}}}}}, "/jupyterhub/custom/gpuhub/gpuPools/a100",
                 "resource", id="pool-without-resource"),
])
def test_bad_values_fail_with_a_clear_message(values, path, says):
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError) as e:
            chart.render(merged(values), name=RELEASE, namespace=NAMESPACE)
    message = str(e.value)
    assert f"at '{path}'" in message and says in message, message


def test_missing_database_secret_fails_with_defaults():
    """Installing with the defaults alone fails, and says what is missing."""
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError, match="/scheduler/database/secretName"):
            chart.render({"jupyterhub": {"enabled": False}}, name=RELEASE, namespace=NAMESPACE)


# ---- the hub config GPU Hub gives z2jh -------------------------------------------------
def z2jh_prepared_config(values: dict, tokens: dict[str, str]) -> Config:
    """What z2jh's jupyterhub_config.py has done before extraConfig runs:
    services from hub.services with their generated tokens, roles from
    hub.loadRoles, and hub.config applied."""
    c = Config()
    hub = values["jupyterhub"]["hub"]
    c.JupyterHub.services = [{**{k: v for k, v in s.items() if k != "apiToken"}, "name": name,
                              "api_token": tokens[name]}
                             for name, s in hub.get("services", {}).items()]
    c.JupyterHub.load_roles = [{"name": k, **v} for k, v in hub.get("loadRoles", {}).items()]
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    for section, traits in hub.get("config", {}).items():
        for k, v in traits.items():
            setattr(c[section], k, v)
    return c


def run_extra_config(values: dict, c: Config, monkeypatch) -> Config:
    def get_config(key, default=None):
        node = values["jupyterhub"]
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return copy.deepcopy(node)

    monkeypatch.setitem(sys.modules, "z2jh", types.SimpleNamespace(get_config=get_config))
    for name, source in sorted(values["jupyterhub"]["hub"]["extraConfig"].items()):
        exec(compile(source, f"extraConfig.{name}", "exec"), {"c": c})
    return c


def chart_values(*overrides: dict) -> dict:
    with helm.Chart.load(CHART) as chart:
        out = chart.merge_values({"scheduler": {"database": {"secretName": "db"}}})
    for o in overrides:
        _merge(out, o)
    return out


TOKENS = {"gpuhub": "svc-token", "gpuhub-spawner": "spawner-token", "other": "other-token"}


def test_hub_extra_config_sets_up_gpuhub(monkeypatch):
    values = chart_values()
    c = run_extra_config(values, z2jh_prepared_config(values, TOKENS), monkeypatch)
    assert c.JupyterHub.spawner_class == "gpuspawner.spawner.kube.KubeGPUSpawner"
    assert c.JupyterHub.authenticator_class == "gpuspawner.hub.auth.GpuHubAuthenticator"
    assert c.JupyterHub.custom_scopes == gpuhub_config.CUSTOM_SCOPES
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {"gpuhub", "gpuhub-spawner", "gpuhub-culler"}
    # The hub knows the service where the chart's Service puts it, by the
    # token the service's pod reads from z2jh's Secret.
    docs = manifests(merged())
    svc = one(docs, "Service")
    assert services["gpuhub"]["url"] == \
        f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"
    assert "command" not in services["gpuhub"]
    assert services["gpuhub"]["api_token"] == "svc-token"
    assert services["gpuhub"]["oauth_client_allowed_scopes"] == gpuhub_config.OAUTH_SCOPES
    assert c.GPUSpawnerMixin.gpuhub_token == services["gpuhub-spawner"]["api_token"] == "spawner-token"
    assert c.GPUSpawnerMixin.gpuhub_api_url == "http://gpuhub-service:10101/services/gpuhub/api/v1"
    assert c.GPUSpawnerMixin.gpuhub_public_url == "http://proxy-public/services/gpuhub"
    # The culler runs in the hub pod with the flags of the values.
    culler = services["gpuhub-culler"]
    assert culler["command"][1:3] == ["-m", "gpuspawner.culler"]
    assert culler["command"][3:] == values["jupyterhub"]["custom"]["gpuhub"]["culler"]["args"]
    assert culler["environment"]["GPUHUB_API_URL"] == c.GPUSpawnerMixin.gpuhub_api_url
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert {"user", "gpuhub-admin", "gpuhub-service", "gpuhub-spawner", "gpuhub-culler"} <= set(roles)
    assert roles["gpuhub-service"]["services"] == ["gpuhub"]
    # The admin-panel link: GPU Hub's page.html comes first.
    page = os.path.join(c.JupyterHub.template_paths[0], "page.html")
    assert "gpuhub-admin-link" in open(page).read()
    assert "announcement" in c.JupyterHub.template_vars
    assert c.KubeGPUSpawner.priority_class_names == {"interactive": "gpuhub-interactive"}
    assert c.KubeGPUSpawner.pod_start_timeout == 900
    assert c.GpuHubAuthenticator.initial_users_file == \
        values["jupyterhub"]["custom"]["gpuhub"]["auth"]["initialUsersFile"]
    # z2jh's own culler is off: GPU Hub's replaces it.
    assert values["jupyterhub"]["cull"]["enabled"] is False
    # The initial users' Secret is mounted where the hub config looks.
    mount = values["jupyterhub"]["hub"]["extraVolumeMounts"][0]["mountPath"]
    assert c.GpuHubAuthenticator.initial_users_file.startswith(mount + "/")


def test_hub_extra_config_keeps_what_the_site_configured(monkeypatch):
    values = chart_values({"jupyterhub": {"hub": {
        "services": {"other": {"url": "http://other:9000"}},
        "loadRoles": {"other": {"services": ["other"], "scopes": ["read:users"]}},
        "templatePaths": ["/etc/site/templates"],
    }, "custom": {"gpuhub": {
        "culler": {"enabled": False},
        "gpuPools": {"a100": {"resource": "nvidia.com/gpu",
                              "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}},
    }}}})
    c = z2jh_prepared_config(values, TOKENS)
    c.JupyterHub.template_paths = ["/etc/site/templates"]
    c.JupyterHub.template_vars = {"site": "GPU Cluster"}
    c = run_extra_config(values, c, monkeypatch)
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert set(services) == {"gpuhub", "gpuhub-spawner", "other"}  # culler off
    assert services["other"]["api_token"] == "other-token"
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "other" in roles and "gpuhub-culler" not in roles
    assert c.JupyterHub.template_paths[1:] == ["/etc/site/templates"]
    assert c.JupyterHub.template_vars["site"] == "GPU Cluster"
    assert c.KubeGPUSpawner.gpu_pools["a100"]["resource"] == "nvidia.com/gpu"


def test_hub_extra_config_with_the_sites_authenticator(monkeypatch):
    values = chart_values({"jupyterhub": {
        "hub": {"config": {"JupyterHub": {"authenticator_class": "github"}}},
        "custom": {"gpuhub": {"auth": {"native": False}}}}})
    c = run_extra_config(values, z2jh_prepared_config(values, TOKENS), monkeypatch)
    assert c.JupyterHub.authenticator_class == "github"
    assert c.JupyterHub.spawner_class == "gpuspawner.spawner.kube.KubeGPUSpawner"


def test_hub_extra_config_without_the_services_tokens_says_so(monkeypatch):
    values = chart_values()
    del values["jupyterhub"]["hub"]["services"]["gpuhub-spawner"]
    with pytest.raises(ChartConfigError, match="jupyterhub.hub.services.gpuhub-spawner"):
        run_extra_config(values, z2jh_prepared_config(values, TOKENS), monkeypatch)


# ---- the rendered Deployment's command, config and environment start the service --------
def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rendered_service_starts_and_answers_its_probes(tmp_path):
    """The Deployment's command with the ConfigMap's files and the pod's
    environment (Secrets filled in) starts the real service, which answers
    the probes' path without a token and everything else only with one."""
    import signal
    import subprocess
    import time

    import requests

    port = free_port()
    data = tmp_path / "data"
    docs = manifests(merged({
        "backend": {"type": "local"},  # no cluster here
        "scheduler": {"port": port,
                      "config": {"GpuHubService": {"teams": {"vision": {"quotas": {
                          "default": {"nominal": 2}}}}}},
                      # the pod's volume is /var/lib/gpuhub; here a temporary one
                      "extraConfig": f"c.GpuHubService.data_dir = {str(data)!r}\n"}}))
    etc = tmp_path / "etc-gpuhub"
    etc.mkdir()
    for name, text in config_files(docs).items():
        (etc / name).write_text(text)
    c = container(docs)
    secrets = {("gpuhub-db", "url"): f"sqlite:///{tmp_path}/gpuhub.sqlite",
               ("hub", "hub.services.gpuhub.apiToken"): "token-from-z2jh"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "GPUHUB_"))}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in e["valueFrom"]:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = secrets[(ref["name"], ref["key"])]
        else:
            env[e["name"]] = NAMESPACE  # metadata.namespace
    env["GPUHUB_DATA_DIR"] = str(data)
    command = [sys.executable if a == "python3" else a for a in c["command"]]
    command[command.index("/etc/gpuhub/gpuhub_config.py")] = str(etc / "gpuhub_config.py")
    log = open(tmp_path / "service.log", "wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp_path, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "service.log").read_text()
            try:
                r = requests.get(base + c["readinessProbe"]["httpGet"]["path"], timeout=5)
                if r.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "service.log").read_text()
            time.sleep(0.5)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            r = requests.get(base + c[probe]["httpGet"]["path"], timeout=5)
            assert r.status_code == 200 and r.json()["status"] == "ok", probe
        r = requests.get(base + "/services/gpuhub/api/v1/teams", timeout=5)
        assert r.status_code in (401, 403), r.status_code
        assert (data / "cookie_secret").exists()  # state went to the data volume
        # scheduler.config reached the service: its team is in the database
        import sqlite3
        with sqlite3.connect(tmp_path / "gpuhub.sqlite") as db:
            assert ("vision",) in db.execute("SELECT name FROM teams").fetchall()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_model_replicas_read_the_workspaces_the_service_mounts():
    """With the documented values, the service sees the workspaces where the
    replicas it makes mount them."""
    from gpuspawner.backends.base import LaunchSpec
    from gpuspawner.backends.kubernetes.manifests import KubeSettings
    from gpuspawner.backends.kubernetes.serving import replica_manifests
    from gpuspawner.serving.replica import model_settings, server_settings
    docs = manifests(merged(VALUE_SETS["model-deployments"]))
    settings = json.loads(config_files(docs)["settings.json"])
    jobs = settings["KubernetesJobs"]
    home = settings["GpuHubService"]["workspace_root"].format(username="alice")
    service_pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    [mount] = [m for c in service_pod["containers"] for m in c.get("volumeMounts", [])
               if m["name"] == "workspaces"]
    assert home.startswith(mount["mountPath"] + "/")
    assert mount["mountPath"] == jobs["workspace_mount"]
    ks = KubeSettings(namespace=jobs["namespace"], image=jobs["image"],
                      workspace_claim=jobs["workspace_claim"],
                      workspace_mount=jobs["workspace_mount"])
    spec = LaunchSpec(workload_id="w1", attempt=0, argv=(), attempt_dir="", cwd="",
                      team="vision", user="alice", serving={
                          "name": "iris", "revision": 1, "server": server_settings(9000),
                          "model": model_settings("iris", f"{home}/models/iris", "sklearn", "",
                                                  16, 0.005, "r1")})
    _, deployment = replica_manifests(spec, ks)
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "workspaces", "persistentVolumeClaim": {"claimName": "gpuhub-workspaces"}} \
        in pod["volumes"]
    assert {"name": "workspaces", "mountPath": "/home"} in pod["containers"][0]["volumeMounts"]
    assert pod["containers"][0]["image"] == jobs["image"]
