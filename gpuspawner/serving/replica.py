"""What one replica runs: MLServer, with its settings files written into the
replica's directory. MLServer serves the Open Inference Protocol v2 and
batches concurrent requests itself (``max_batch_size``/``max_batch_time``)."""
from __future__ import annotations

import json
import os
import sys

# runtime name -> MLServer implementation class
RUNTIMES = {
    "sklearn": "gpuspawner.serving.runtime.SafeSKLearnModel",
    "predictor": "gpuspawner.serving.runtime.PredictorModel",
}


def model_settings(name: str, model_dir: str, runtime: str, predictor: str,
                   max_batch_size: int, max_batch_time: float, version: str) -> dict:
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(sorted(RUNTIMES))}")
    parameters: dict = {"uri": os.path.abspath(model_dir), "version": version}
    if runtime == "predictor":
        parameters["extra"] = {"predictor": predictor}
    out = {"name": name, "implementation": RUNTIMES[runtime], "parameters": parameters}
    if max_batch_size > 1:
        out.update(max_batch_size=max_batch_size, max_batch_time=max_batch_time)
    return out


def model_ready_path(name: str) -> str:
    """Where a replica says its model is ready to infer: the router's probe
    and Kubernetes' readiness probe ask the same (a server whose model was
    unloaded is up, and says so on /v2/health/ready, but cannot infer)."""
    return f"/v2/models/{name}/ready"


def server_settings(http_port: int) -> dict:
    # Only the HTTP server listens (mlserver_guarded starts no gRPC or
    # metrics server: the replica's guard covers HTTP only). The ports next to
    # it stay reserved, as the service picks three free ports in a row.
    return {"http_port": http_port, "grpc_port": http_port + 1, "metrics_port": http_port + 2,
            "metrics_endpoint": None, "host": "127.0.0.1", "parallel_workers": 0,
            "debug": False, "load_models_at_startup": True}


def bind_to(path: str, host: str) -> None:
    """The replica in ``path`` listens on ``host`` rather than the loopback
    address: a cluster backend's replica runs on another machine (a Slurm
    node's NodeAddr) and the router reaches it there."""
    settings = os.path.join(path, "settings.json")
    with open(settings) as f:
        server = json.load(f)
    server["host"] = host
    with open(settings + ".tmp", "w") as f:
        json.dump(server, f, indent=2)
    os.chmod(settings + ".tmp", os.stat(settings).st_mode & 0o777)
    os.replace(settings + ".tmp", settings)


def write_replica_dir(path: str, model: dict, server: dict) -> list[str]:
    """Write the settings into ``path``; returns the command that serves them
    (MLServer behind the replica's guard, which needs ``guard.KEY_ENV``)."""
    os.makedirs(os.path.join(path, "model"), exist_ok=True)
    with open(os.path.join(path, "settings.json"), "w") as f:
        json.dump(server, f, indent=2)
    with open(os.path.join(path, "model", "model-settings.json"), "w") as f:
        json.dump(model, f, indent=2)
    return [sys.executable, "-m", "gpuspawner.serving.mlserver_guarded", path]
