"""REST handlers of the admin operations (drain, GPUs out of service,
prices, priority, hold). Thin: parse, call ``operations``, answer."""
from __future__ import annotations

from typing import Any

from gpuspawner.service.workloads import operations as ops
from gpuspawner.service.workloads import views
from gpuspawner.service.api.base import APIHandler
from gpuspawner.vocab.specs import SpecError


KIND_NAMES = {bool: "true or false", str: "a string", (int, float): "a number"}


def _object(body: Any, fields: dict[str, Any]) -> dict:
    """The body as a JSON object with only these fields, each of its kind."""
    if not isinstance(body, dict):
        raise SpecError("body", f"must be a JSON object with {', '.join(fields)}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise SpecError(unknown[0], f"is not a known field; known fields: {', '.join(fields)}")
    for name, kind in fields.items():
        value = body.get(name)
        if name in body and (not isinstance(value, kind)
                             or (kind is not bool and isinstance(value, bool))):
            raise SpecError(name, f"must be {KIND_NAMES[kind]}, got {value!r}")
    return body


class NodeHandler(APIHandler):
    def patch(self, name: str):
        body = _object(self.json_body(), {"drained": bool, "reason": str})
        if "drained" not in body:
            raise SpecError("drained", "is required: true to drain the node, false to undrain it")
        self.write_json(ops.set_drained(self.steering, self.identity, name, body["drained"],
                                        body.get("reason", "")))


class NodeGpuHandler(APIHandler):
    def patch(self, name: str, index: str):
        body = _object(self.json_body(), {"in_service": bool, "reason": str})
        if "in_service" not in body:
            raise SpecError("in_service", "is required: false takes the GPU out of service")
        if not index.isdigit():
            raise SpecError("index", "must be a GPU number")
        self.write_json(ops.set_gpu_in_service(self.steering, self.identity, name, int(index),
                                               body["in_service"], body.get("reason", "")))


class PoolHandler(APIHandler):
    def patch(self, name: str):
        body = _object(self.json_body(), {"price_per_gpu_hour": (int, float)})
        if "price_per_gpu_hour" not in body:
            raise SpecError("price_per_gpu_hour", "is required")
        self.write_json(ops.set_price(self.steering, self.identity, name,
                                      body["price_per_gpu_hour"]))


class HoldHandler(APIHandler):
    def post(self, wid: str):
        self.write_json(views.workload(ops.hold(self.steering, self.identity, wid)))


class UnholdHandler(APIHandler):
    def post(self, wid: str):
        self.write_json(views.workload(ops.release_hold(self.steering, self.identity, wid)))


class PriorityHandler(APIHandler):
    def put(self, wid: str):
        body = _object(self.json_body(), {"priority": str})
        if "priority" not in body:
            raise SpecError("priority", "is required")
        self.write_json(views.workload(ops.set_priority(self.steering, self.identity, wid,
                                                        body["priority"])))
