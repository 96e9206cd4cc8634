"""Each job attempt's token is made by the service and kept in the database
(its SHA-256, never the token), so a restart of the service loses nothing:
the token keeps working, an attempt that ends after the restart has its token
revoked, and at start the tokens of attempts that ended meanwhile are
revoked. Tokens the hub made (a service from before) are deleted there: a
stand-in hub (real HTTP on a local port) counts what it is asked; the real
database."""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.serving.ports import ports_below_ephemeral
from gpuspawner.service.access.job_tokens import PREFIX, JobTokens
from gpuspawner.store import JobTokenRow, Store, WorkloadRow
from test_start_estimates_service import ALICE, Clock, make_engine
from gpuspawner.vocab.specs import parse_job


class FakeHub(ThreadingHTTPServer):
    """Deletes the tokens it holds (``tokens``, filled by the test); ``fail``:
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


def test_a_job_token_is_made_and_checked_here_and_the_hub_is_never_asked(hub, db_url):
    store = Store(db_url)
    jt = tokens(hub, store)
    env = jt.env_for(spec("w1"))
    token = env["GPUHUB_TOKEN"]
    assert token.startswith(PREFIX) and len(token) > len(PREFIX) + 40
    assert env["GPUHUB_URL"] == "http://127.0.0.1:1/services/gpuhub"
    [row] = kept(store).values()
    # a hash: the token itself is not in the database
    assert (row.user, row.token_id) == ("alice", "")
    assert row.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert row.expires_at - row.issued_at >= 600
    held = jt.holder(token)
    assert (held.user, held.job.workload, held.job.attempt) == ("alice", "w1", 0)
    assert jt.holder(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert jt.holder(PREFIX + "made-up") is None
    assert jt.env_for(spec("w1", 1))["GPUHUB_TOKEN"] != token  # each attempt its own
    jt.close()
    assert hub.tokens == {} and hub.deleted == []  # no request reached the hub
    store.close()


def test_a_token_another_service_made_is_nothing_here(hub, tmp_path):
    """Two hubs on one host: each service knows only the tokens it made."""
    mine = tokens(hub, Store(f"sqlite:///{tmp_path}/a.db"))
    theirs = tokens(hub, Store(f"sqlite:///{tmp_path}/b.db"))
    token = theirs.env_for(spec("w1"))["GPUHUB_TOKEN"]
    mine.env_for(spec("w1"))                      # the same workload id and attempt here
    assert theirs.holder(token) is not None and mine.holder(token) is None
    for jt in (mine, theirs):
        jt.close()
        jt.store.close()


def test_a_job_token_ends_with_its_attempt_or_its_lifetime(hub, db_url):
    clock = Clock(1_767_225_600.0)
    store = Store(db_url)
    jt = JobTokens(hub.url, "service-token", "http://127.0.0.1:1/services/gpuhub", store=store,
                   clock=clock)
    ended, running = jt.env_for(spec("w1"))["GPUHUB_TOKEN"], jt.env_for(spec("w2"))["GPUHUB_TOKEN"]
    assert jt.revoke("w1", 0)                  # made here: its row goes with the end's record
    assert jt.holder(ended) is None            # at once, before the row is gone
    assert jt.holder(running) is not None
    clock.t += 600 + 3600 + 30                 # time limit + margin + grace: expired
    assert jt.holder(running) is None
    jt.close()
    assert set(kept(store)) == {("w1", 0), ("w2", 0)}
    store.close()


def test_the_row_of_a_token_goes_in_the_transaction_that_records_its_attempts_end(
        hub, db_url, tmp_path):
    from gpuspawner.backends.base import AttemptExit
    clock = Clock(1_767_225_600.0)
    engine = make_engine(db_url, tmp_path, clock)
    wid = engine.submit(ALICE, parse_job({"command": [sys.executable, "-c", "pass"], "gpus": 1,
                                          "pool": "default"})).id
    engine.tick()
    jt = engine.config.job_tokens = tokens(hub, engine.store)
    token = jt.env_for(spec(wid))["GPUHUB_TOKEN"]
    assert set(kept(engine.store)) == {(wid, 0)}
    engine.on_exits([AttemptExit(wid, 0, "exited", 0, clock.t + 5)])
    assert jt.holder(token) is None and kept(engine.store) == {}
    with engine.store.session() as s:
        assert s.get(WorkloadRow, wid).state == "succeeded"
    jt.close()
    engine.store.close()


def test_a_token_issued_before_a_restart_works_after_it_and_is_revoked_when_its_attempt_ends(
        hub, db_url):
    store = Store(db_url)
    before = tokens(hub, store)
    token = before.env_for(spec("w1"))["GPUHUB_TOKEN"]
    before.close()
    after = tokens(hub, store)             # the service restarted: read from the database
    assert after.holder(token).job.workload == "w1"
    assert after.revoke("w1", 0)
    assert after.holder(token) is None
    after.close()
    store.close()


def hub_made(store, hub, wid: str, attempt: int = 0) -> None:
    """A token the hub made for an attempt, as a service before this one kept it."""
    token_id = f"a{len(hub.tokens) + 1}"
    hub.tokens[token_id] = "alice"
    with store.transaction() as s:
        s.add(JobTokenRow(workload_id=wid, attempt=attempt, user="alice", token_id=token_id,
                          token_sha256=hashlib.sha256(token_id.encode()).hexdigest(),
                          issued_at=0.0, expires_at=1e12))


def test_at_start_the_tokens_of_attempts_that_ended_meanwhile_are_revoked(hub, db_url, tmp_path):
    engine = make_engine(db_url, tmp_path, Clock(1_767_225_600.0))
    wid = engine.submit(ALICE, parse_job({"command": [sys.executable, "-c", "pass"], "gpus": 1,
                                          "pool": "default"})).id
    engine.tick()
    before = tokens(hub, engine.store)
    running = before.env_for(spec(wid))["GPUHUB_TOKEN"]   # its attempt 0 runs
    gone = before.env_for(spec("gone"))["GPUHUB_TOKEN"]   # an attempt that is not running any more
    hub_made(engine.store, hub, "gone-too")               # made by the hub, before an upgrade
    before.close()
    after = tokens(hub, engine.store)
    assert after.revoke_ended() == 2
    after.close()
    assert hub.deleted == ["a1"] and set(kept(engine.store)) == {(wid, 0)}
    assert after.holder(gone) is None and after.holder(running) is not None
    engine.store.close()


@pytest.mark.parametrize("status, row_kept", [
    (404, False),   # gone already (expired, deleted by hand): nothing left to do
    (500, True),    # the hub failed: kept, so that the next start tries again
])
def test_a_token_the_hub_made_and_did_not_delete_is_kept_only_if_it_may_still_exist(
        hub, db_url, status, row_kept):
    store = Store(db_url)
    hub_made(store, hub, "w1")
    jt = tokens(hub, store)
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
