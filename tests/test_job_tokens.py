"""Each job attempt's hub token is kept in the database (its hub id and
SHA-256, never the token), so a restart of the service loses nothing: an
attempt that ends after the restart has its token revoked, and at start the
tokens of attempts that ended meanwhile are revoked. A stand-in hub (real
HTTP on a local port) issues and deletes the tokens; the real database."""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.service.access.job_tokens import JobTokens
from gpuspawner.store import JobTokenRow, Store
from test_start_estimates_service import ALICE, Clock, make_engine
from gpuspawner.vocab.specs import parse_job


class FakeHub(ThreadingHTTPServer):
    """Issues tokens (``POST /users/U/tokens``) and deletes them; ``fail``:
    the status every DELETE answers (0: the real answer)."""

    def __init__(self):
        super().__init__(("127.0.0.1", ports_below_ephemeral(1)), HubHandler)
        self.tokens: dict[str, str] = {}   # token id -> its user
        self.deleted: list[str] = []
        self.fail = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hub/api"


class HubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status: int, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        hub = self.server
        user = self.path.split("/")[4]
        token_id = f"a{len(hub.tokens) + len(hub.deleted) + 1}"
        hub.tokens[token_id] = user
        self.rfile.read(int(self.headers["Content-Length"]))
        self.answer(201, {"id": token_id, "token": f"secret-{token_id}"})

    def do_DELETE(self):
        hub = self.server
        token_id = self.path.rsplit("/", 1)[1]
        if hub.fail:
            return self.answer(hub.fail, {"message": "no"})
        if hub.tokens.pop(token_id, None) is None:
            return self.answer(404, {"message": "no such token"})
        hub.deleted.append(token_id)
        self.answer(204)


@pytest.fixture
def hub():
    server = FakeHub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def tokens(hub, store) -> JobTokens:
    return JobTokens(hub.url, "service-token", "http://127.0.0.1:1/services/gpuhub", store=store)


def spec(wid: str, attempt: int = 0) -> LaunchSpec:
    return LaunchSpec(workload_id=wid, attempt=attempt, argv=("true",), attempt_dir="",
                      cwd="/", user="alice", time_limit=600.0)


def kept(store) -> dict:
    with store.session() as s:
        return {(r.workload_id, r.attempt): r for r in s.query(JobTokenRow).all()}


def test_a_token_issued_before_a_restart_is_revoked_when_its_attempt_ends_after_it(hub, db_url):
    store = Store(db_url)
    before = tokens(hub, store)
    env = before.env_for(spec("w1"))
    assert env["GPUHUB_TOKEN"] == "secret-a1"
    [row] = kept(store).values()
    # the hub's id and a hash: the token itself is not in the database
    assert (row.user, row.token_id) == ("alice", "a1")
    assert row.token_sha256 == hashlib.sha256(b"secret-a1").hexdigest()
    assert row.expires_at - row.issued_at >= 600
    before.close()
    after = tokens(hub, store)             # the service restarted: nothing in memory
    after.revoke("w1", 0)
    after.close()
    assert hub.deleted == ["a1"] and kept(store) == {}
    store.close()


def test_at_start_the_tokens_of_attempts_that_ended_meanwhile_are_revoked(hub, db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, Clock(1_767_225_600.0))
    wid = engine.submit(ALICE, parse_job({"command": [sys.executable, "-c", "pass"], "gpus": 1,
                                          "pool": "default"})).id
    engine.tick()
    before = tokens(hub, engine.store)
    before.env_for(spec(wid))              # its attempt 0 runs
    before.env_for(spec("gone"))           # an attempt that is not running any more
    before.close()
    after = tokens(hub, engine.store)
    assert after.revoke_ended() == 1
    after.close()
    assert hub.deleted == ["a2"] and set(kept(engine.store)) == {(wid, 0)}
    engine.store.close()


@pytest.mark.parametrize("status, row_kept", [
    (404, False),   # gone already (expired, deleted by hand): nothing left to do
    (500, True),    # the hub failed: kept, so that the next start tries again
])
def test_a_token_the_hub_did_not_delete_is_kept_only_if_it_may_still_exist(hub, db_url, status,
                                                                            row_kept):
    store = Store(db_url)
    jt = tokens(hub, store)
    jt.env_for(spec("w1"))
    hub.fail = status
    jt.revoke("w1", 0)
    jt.close()
    assert (("w1", 0) in kept(store)) is row_kept
    store.close()


def test_a_token_id_the_hub_gives_again_is_not_taken_for_the_deleted_job_token():
    """The hub may give a deleted token's id to the next token it makes
    (SQLite reuses the highest row id): a job's token a7, revoked when its
    attempt ended, must not make dave's new token a7 a job's token (nor a
    plain token's cached answer make a new job token a7 a plain one)."""
    import asyncio
    from gpuspawner.service.access.hub_api import HubApi
    notes = {"a7": "gpuhub job w1 attempt 0"}
    asked = []

    class Hub(HubApi):
        async def call(self, method, path, body=None):
            asked.append(path)
            return {"note": notes[path.rsplit("/", 1)[1]]}

    hub = Hub(group_cache_seconds=0)
    model = {"kind": "user", "name": "dave", "token_id": "a7"}

    async def go():
        job = await hub.job_of_token(model, "the-job-token")
        assert (job.workload, job.attempt) == ("w1", 0)
        notes["a7"] = "dave's terminal"          # revoked; a new token got id a7
        assert await hub.job_of_token(model, "daves-new-token") is None
        assert await hub.job_of_token(model, "daves-new-token") is None
        notes["a7"] = "gpuhub job w2 attempt 1"  # and again, for a job
        job = await hub.job_of_token(model, "the-next-job-token")
        assert (job.workload, job.attempt) == ("w2", 1)
    asyncio.run(go())
    assert len(asked) == 3  # once per token, not per request
