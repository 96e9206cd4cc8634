# GPU Hub on a Kubernetes cluster: JupyterHub in a pod, configurable-http-proxy
# in its own pod, the scheduler service as an external service, PostgreSQL,
# notebook servers as pods (KubeGPUSpawner) on the GPUs the scheduler gives
# them. The embedded single-machine setup is ../jupyterhub_config.py; the
# scopes and roles here are the same (tests/test_kube_spawner.py checks).
#
# Environment (from the hub Deployment; secrets from Secrets):
#   GPUHUB_HUB_DB_URL         required, the hub's database,
#                             postgresql+psycopg://jupyterhub:PASSWORD@postgres:5432/jupyterhub
#   GPUHUB_SPAWNER_TOKEN      required, the spawner's token for the scheduler
#                             service (service gpuhub-spawner, custom:gpuhub:admin)
#   GPUHUB_SERVICE_API_TOKEN  required, the scheduler service's own hub API
#                             token (its pod gets it as JUPYTERHUB_API_TOKEN)
#   JPY_COOKIE_SECRET         the hub's cookie secret (JupyterHub reads it)
#   CONFIGPROXY_AUTH_TOKEN    the proxy's API token (JupyterHub and the proxy read it)
#   GPUHUB_SERVICE_URL        the scheduler service, default http://gpuhub-service:10101
#   GPUHUB_PUBLIC_URL         the service as notebook pods reach it through the
#                             proxy, default http://proxy-public/services/gpuhub
#   GPUHUB_HUB_CONNECT_URL    the hub as pods reach it, default http://hub:8081
#   GPUHUB_PROXY_API_URL      the proxy's API, default http://proxy-api:8001
#   GPUHUB_NOTEBOOK_IMAGE     the notebook image (jupyterhub-singleuser and the
#                             gpuhub CLI in it), default quay.io/jupyter/pytorch-notebook:cuda12-latest
#   GPUHUB_INITIAL_USERS      optional, a mounted JSON file of first users,
#                             admins and groups (as `gpuhub up` writes)
#   GPUHUB_USER_STORAGE       optional, size of each user's home volume
#                             (default 10Gi; "" for no volume)
import os

from gpuspawner.hub import config as gpuhub
from gpuspawner.hub.chart import DEFAULT_SERVICE_URL  # the Helm chart's Service and port

c = get_config()  # noqa: F821


def env(name, default=None):
    value = os.environ.get(name, default)
    if not value:
        raise RuntimeError(f"hub_config/kubernetes/jupyterhub_config.py: ${name} is not set "
                           f"(see the comment at the top of the file)")
    return value


# ---- the hub, the proxy, the database ---------------------------------------
c.JupyterHub.hub_bind_url = "http://:8081"
c.JupyterHub.hub_connect_url = env("GPUHUB_HUB_CONNECT_URL", "http://hub:8081")
c.JupyterHub.bind_url = "http://:8000"
# The proxy runs in its own pod and keeps routes across hub restarts.
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = env("GPUHUB_PROXY_API_URL", "http://proxy-api:8001")
# Notebook pods keep running while the hub restarts (an upgrade must not
# stop everyone's servers, nor give their GPUs back).
c.JupyterHub.cleanup_servers = False
c.JupyterHub.db_url = env("GPUHUB_HUB_DB_URL")

# ---- authentication: as the embedded hub (replace with the site's SSO) ------
gpuhub.configure_auth(c, os.environ.get("GPUHUB_INITIAL_USERS", ""))

# ---- the scheduler service (its own Deployment), scopes, roles, the spawner's
# token, the culler (run by the hub in its pod) and the notice banner --------
service_url = env("GPUHUB_SERVICE_URL", DEFAULT_SERVICE_URL).rstrip("/")
spawner_token = env("GPUHUB_SPAWNER_TOKEN")
gpuhub.configure(c, service={"url": service_url, "api_token": env("GPUHUB_SERVICE_API_TOKEN")},
                 service_api=f"{service_url}/services/gpuhub/api/v1", spawner_token=spawner_token)

# ---- notebook servers: pods on the GPUs the scheduler admitted them with ----
c.JupyterHub.spawner_class = "gpuspawner.spawner.kube.KubeGPUSpawner"
c.GPUSpawnerMixin.gpuhub_public_url = env("GPUHUB_PUBLIC_URL",
                                          "http://proxy-public/services/gpuhub")
c.KubeSpawner.image = env("GPUHUB_NOTEBOOK_IMAGE",
                          "quay.io/jupyter/pytorch-notebook:cuda12-latest")
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.KubeSpawner.cpu_guarantee = 0.5
c.KubeSpawner.mem_guarantee = "2G"
storage = os.environ.get("GPUHUB_USER_STORAGE", "10Gi")
if storage:
    c.KubeSpawner.storage_pvc_ensure = True
    c.KubeSpawner.storage_capacity = storage
    c.KubeSpawner.pvc_name_template = "home-{user_server}"
    c.KubeSpawner.volumes = {"home": {"name": "home",
                                      "persistentVolumeClaim": {"claimName": "{pvc_name}"}}}
    c.KubeSpawner.volume_mounts = {"home": {"name": "home", "mountPath": "/home/jovyan"}}
    c.KubeSpawner.fs_gid = 100

# How each scheduler pool's GPUs are asked of Kubernetes. The pool names are
# the scheduler service's; its node names must be the nodes' names
# (kubernetes.io/hostname), since each pod is pinned to the node the
# scheduler chose. The GPU nodes are tainted nvidia.com/gpu=...:NoSchedule so
# that only GPU Hub's pods (which tolerate it) run there.
gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
c.KubeGPUSpawner.gpu_pools = {
    "a100": {
        "resource": "nvidia.com/gpu",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "tolerations": [gpu_toleration],
    },
    "h100": {
        "resource": "nvidia.com/gpu",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [gpu_toleration],
    },
    # A100s partitioned with MIG (the device plugin's mixed strategy): one
    # "GPU" of this pool is one 1g.10gb slice.
    "a100-mig-1g": {
        "resource": "nvidia.com/mig-1g.10gb",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                          "nvidia.com/mig.strategy": "mixed"},
        "tolerations": [gpu_toleration],
    },
}
# Kubernetes PriorityClasses by GPU Hub priority (notebooks are interactive).
# The cluster must have them, e.g.
#   kubectl create priorityclass gpuhub-interactive --value=800000 --preemption-policy=Never
c.KubeGPUSpawner.priority_class_names = {"interactive": "gpuhub-interactive"}
c.KubeGPUSpawner.pin_to_scheduled_node = True
c.KubeGPUSpawner.pod_start_timeout = 900  # GPU images are large
