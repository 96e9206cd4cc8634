"""The guard in front of every model replica (gpuspawner/serving/guard.py):
only the holder of the replica's key gets an answer, and the model
repository API needs the service's admin key too. The live replica is tried
from another user's account in tests/test_serving_e2e.py."""
from __future__ import annotations

import asyncio
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuspawner.serving.guard import (ADMIN_ENV, ADMIN_HEADER, KEY_ENV, KEY_HEADER, ReplicaGuard,
                                      ReplicaKeys)


async def _model(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})


def ask(guard: ReplicaGuard, path: str, headers: dict) -> tuple[int, bytes]:
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}
    scope = {"type": "http", "method": "POST", "path": path,
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(guard(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def keys(tmp_path):
    return ReplicaKeys(str(tmp_path))


@pytest.mark.parametrize("path, headers, status", [
    ("/v2/models/iris/infer", "none", 401),
    ("/v2/models/iris/infer", "guess", 401),
    ("/v2/models/iris/infer", "other replica", 401),
    ("/v2/models/iris/infer", "key", 200),
    ("/v2/health/ready", "none", 401),
    ("/v2/models/iris/ready", "key", 200),
    ("/v2/repository/models/iris/unload", "none", 401),
    ("/v2/repository/models/iris/unload", "key", 403),
    ("//v2//repository/models/iris/load", "key", 403),
    ("/v2/repository/index", "key", 403),
    ("/v2/repository/models/iris/unload", "key + admin", 200),
    ("/v2/repository/models/iris/unload", "key + other admin", 403),
])
def test_only_the_key_holder_gets_an_answer(keys, path, headers, status):
    env = keys.env("w1", 0)
    guard = ReplicaGuard(_model, env[KEY_ENV], env[ADMIN_ENV])
    given = {"none": {}, "guess": {KEY_HEADER: "0" * 64},
             "other replica": keys.headers("w1", 1), "key": keys.headers("w1", 0),
             "key + admin": keys.admin_headers("w1", 0),
             "key + other admin": {**keys.headers("w1", 0),
                                   ADMIN_HEADER: keys.admin_headers("w2", 0)[ADMIN_HEADER]}}[headers]
    code, body = ask(guard, path, given)
    assert code == status, body
    assert (body == b"served") == (status == 200)


def test_the_replica_gets_its_key_and_only_a_digest_of_the_admin_key(keys, tmp_path):
    env = keys.env("w1", 0)
    admin = keys.admin_headers("w1", 0)[ADMIN_HEADER]
    assert env[KEY_ENV] == keys.headers("w1", 0)[KEY_HEADER]
    assert admin not in env.values()
    # the same keys after a restart of the service (from the same secret file)...
    assert ReplicaKeys(str(tmp_path)).env("w1", 0) == env
    # ...which only root reads
    mode = os.stat(tmp_path / "replica-secret").st_mode
    assert stat.S_IMODE(mode) == 0o600
    # a new attempt is a new key
    assert keys.key("w1", 1) != env[KEY_ENV]


def test_a_replica_without_its_key_does_not_start():
    with pytest.raises(ValueError, match="needs its key"):
        ReplicaGuard(_model, "")


def test_replicas_starting_at_once_all_get_the_one_secret(tmp_path):
    # The secret is made at the first replica's start, and the service starts
    # replicas from two threads (and a restarted service may read it while an
    # old one writes it): a reader must never take a half-written file for a
    # bad one, nor keep a bad one.
    for round_ in range(30):
        data_dir = tmp_path / str(round_)
        data_dir.mkdir()
        shared = ReplicaKeys(str(data_dir))
        keys = [shared] * 4 + [ReplicaKeys(str(data_dir)) for _ in range(4)]
        start = threading.Barrier(len(keys))

        def secret(k):
            start.wait()
            return k.secret
        with ThreadPoolExecutor(len(keys)) as pool:
            secrets = set(pool.map(secret, keys))
        assert len(secrets) == 1
        (only,) = secrets
        assert re.fullmatch(rb"[0-9a-f]{64}", only)
        assert (data_dir / "replica-secret").read_bytes() == only
        assert sorted(os.listdir(data_dir)) == ["replica-secret"], "no temporary file is left"


def test_a_half_written_secret_left_by_a_dead_service_with_this_pid_is_no_obstacle(tmp_path):
    # The temporary name is the writer's pid and thread: a service that died
    # writing it left one, and this service has that pid.
    left = tmp_path / f"replica-secret.{os.getpid()}.{threading.get_ident()}"
    left.write_text("half")
    secret = ReplicaKeys(str(tmp_path)).secret
    assert re.fullmatch(rb"[0-9a-f]{64}", secret)
    assert sorted(os.listdir(tmp_path)) == ["replica-secret"]
