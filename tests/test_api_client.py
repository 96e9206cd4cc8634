"""The service's Python client is generated from its OpenAPI document
(scripts/gen_client.py, ``make client``), as the Lab's TypeScript types are:
regenerated here it must be what is committed, so no caller of the service
(the CLI, the Lab's server extension, the spawner, the culler, the benches)
can drift from it. And what the generated methods send."""
from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import sys

import pytest
import yaml

from gpuspawner.client import GpuHubClient
from gpuspawner.client.aio import AsyncApi
from gpuspawner.client.errors import ApiError, error_of
from gpuspawner.client.operations import Api, Unsent
from gpuspawner.client.request import Request, query, segment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "gpuspawner", "service", "api", "openapi.yaml")


@functools.lru_cache(maxsize=None)
def generator():
    spec = importlib.util.spec_from_file_location(
        "gen_client", os.path.join(ROOT, "scripts", "gen_client.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_client"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def document() -> dict:
    with open(SPEC) as f:
        return yaml.safe_load(f)


def test_the_committed_client_is_what_the_openapi_document_generates():
    for name, text in generator().render(document()).items():
        with open(os.path.join(ROOT, "gpuspawner", "client", name)) as f:
            assert f.read() == text, (
                f"gpuspawner/client/{name} is not what openapi.yaml generates: run "
                "`make client` (.venv/bin/python scripts/gen_client.py) and commit it")


def test_a_new_operation_changes_the_generated_client():
    spec = document()
    spec["paths"]["/teams/{name}"]["delete"] = {
        "operationId": "deleteTeam", "summary": "Forget a team",
        "responses": {"204": {"description": "gone"}}}
    made = generator().render(spec)["operations.py"]
    assert "    def delete_team(self, name: str) -> None:" in made
    assert 'return self._send(Request("DELETE", f"/teams/{segment(name)}"))' in made


def test_an_operation_without_an_operation_id_is_refused():
    spec = document()
    del spec["paths"]["/me"]["get"]["operationId"]
    gen = generator()
    with pytest.raises(gen.SpecError, match="GET /me has no operationId"):
        gen.render(spec)


def operations(spec: dict) -> list[tuple[str, str, str]]:
    return [(op["operationId"], method, path) for path, item in spec["paths"].items()
            for method, op in item.items() if method in ("get", "put", "post", "delete", "patch")]


@pytest.mark.parametrize("op_id, method, path", operations(document()))
def test_every_operation_is_one_method_of_both_clients(op_id, method, path):
    name = generator().snake(op_id)
    assert callable(getattr(Api, name)) and asyncio.iscoroutinefunction(getattr(AsyncApi, name))
    assert f"{method.upper()} {path}" in getattr(Api, name).__doc__


@pytest.mark.parametrize("call, sent", [
    (lambda a: a.get_me(), Request("GET", "/me")),
    (lambda a: a.list_workloads(state=["queued", "running"], kind="job", limit=5, detail=1),
     Request("GET", "/workloads", (("state", "queued"), ("state", "running"), ("kind", "job"),
                                   ("limit", 5), ("detail", 1)))),
    (lambda a: a.get_workload("w/1", wait_while="queued", timeout=5),
     Request("GET", "/workloads/w%2F1", (("wait_while", "queued"), ("timeout", 5)))),
    (lambda a: a.submit_workload({"command": "true"}),
     Request("POST", "/workloads", (), {"command": "true"})),
    (lambda a: a.release_workload("w1", {"reason": "gone"}),
     Request("POST", "/workloads/w1/release", (), {"reason": "gone"})),
    (lambda a: a.get_workload_logs("w1", attempt=0, follow=True),
     Request("GET", "/workloads/w1/logs", (("attempt", 0), ("follow", "true")))),
    (lambda a: a.cancel_revision("a", "iris", 2),
     Request("POST", "/deployments/a/iris/revisions/2/cancel")),
    (lambda a: a.get_usage(from_="2026-01-01", group_by="team"),
     Request("GET", "/usage", (("from", "2026-01-01"), ("group_by", "team")))),
    (lambda a: a.delete_notice(7), Request("DELETE", "/notices/7")),
])
def test_each_method_sends_its_operations_request(call, sent):
    assert call(Unsent()) == sent


def test_the_asynchronous_client_sends_the_same_requests():
    class Recording(AsyncApi):
        async def _send(self, request):
            return request

    got = asyncio.run(Recording().list_sweeps(team=["a"], state=["running"]))
    assert got == Unsent().list_sweeps(team=["a"], state=["running"])
    assert got.target == "/sweeps?team=a&state=running"


@pytest.mark.parametrize("pairs, expected", [
    ((("a", None), ("b", 1)), (("b", 1),)),
    ((("s", ["x", "y"]), ("t", ())), (("s", "x"), ("s", "y"))),
    ((("f", True), ("g", False)), (("f", "true"), ("g", "false"))),
    ((("s", "one string"),), (("s", "one string"),)),
])
def test_a_query_leaves_out_none_and_repeats_a_list(pairs, expected):
    assert query(*pairs) == expected


@pytest.mark.parametrize("value, quoted", [("w1", "w1"), ("a/b", "a%2Fb"), ("x y", "x%20y"),
                                          (3, "3")])
def test_a_path_parameter_stays_in_its_segment(value, quoted):
    assert segment(value) == quoted


@pytest.mark.parametrize("status, body, says, field", [
    (400, b'{"status": 400, "error": "must be positive", "field": "gpus"}',
     "gpus: must be positive", "gpus"),
    (403, b'{"status": 403, "message": "Forbidden"}', "Forbidden", None),  # JupyterHub's
    (404, b"<html>not here</html>",
     "HTTP 404 Not Found from GET http://h/x (is the URL right, and is the gpuhub service "
     "running?)", None),
    (500, b"", "HTTP 500 Internal Server Error from GET http://h/x", None),
])
def test_an_error_carries_the_status_and_the_services_message(status, body, says, field):
    e = error_of(status, body, "GET http://h/x", {404: "Not Found"}.get(status,
                                                                      "Internal Server Error"))
    assert isinstance(e, ApiError)
    assert (e.status, str(e), e.field) == (status, says, field)


def test_the_client_says_where_it_could_not_connect():
    client = GpuHubClient("http://127.0.0.1:9", "tok", timeout=1)
    where = "http://127.0.0.1:9/services/gpuhub/api/v1/me"
    with pytest.raises(ApiError, match=f"cannot reach {where}") as e:
        client.get_me()
    assert e.value.status == 0


def tornado_response(code: int, body: bytes, kind: str = "application/json"):
    from io import BytesIO

    from tornado.httpclient import HTTPRequest, HTTPResponse
    from tornado.httputil import HTTPHeaders
    return HTTPResponse(HTTPRequest("http://svc/api/v1/x"), code,
                        headers=HTTPHeaders({"Content-Type": kind}), buffer=BytesIO(body))


@pytest.mark.parametrize("raised, status, says", [
    ("refused", 0, "cannot reach the GPU Hub service at http://svc/api/v1: [Errno 111] refused"),
    (599, 0, "the GPU Hub service did not answer: HTTP 599: Timeout"),
    (409, 409, "a notebook server's output is in its own log"),
    (502, 502, "HTTP 502 Bad Gateway from GET http://svc/api/v1/workloads/w1/logs (is the URL "
               "right, and is the gpuhub service running?)"),
])
def test_the_tornado_transport_raises_one_error_with_the_services_status_and_message(
        monkeypatch, raised, status, says):
    from tornado.httpclient import HTTPClientError

    from gpuspawner.client import tornado_api

    class Client:
        async def fetch(self, request):
            if raised == "refused":
                raise ConnectionRefusedError(111, "refused")
            body = b'{"status": 409, "error": "a notebook server\'s output is in its own log"}' \
                if raised == 409 else b"<html>bad gateway</html>"
            response = tornado_response(raised, body) if raised != 599 else None
            raise HTTPClientError(raised, {599: "Timeout", 502: "Bad Gateway"}.get(raised),
                                  response)

    monkeypatch.setattr(tornado_api, "AsyncHTTPClient", Client)
    api = tornado_api.TornadoApi("http://svc/api/v1/", "tok")
    with pytest.raises(ApiError) as e:
        asyncio.run(api.get_workload_logs("w1"))
    assert (e.value.status, str(e.value)) == (status, says)


@pytest.mark.parametrize("body, kind, answer", [
    (b'{"workloads": []}', "application/json; charset=UTF-8", {"workloads": []}),
    (b"line 1\n", "text/plain; charset=UTF-8", "line 1\n"),
    (b"", "application/json", None),
])
def test_the_tornado_transport_answers_json_text_or_nothing(body, kind, answer):
    from gpuspawner.client.tornado_api import answer_of
    assert answer_of(tornado_response(200, body, kind)) == answer
