"""Who may talk to a model replica: the service only.

MLServer has no authentication, and its port is reachable by every account
on the host (on a Slurm node or in a cluster, by everyone on that network).
So each replica attempt gets its own key, HMAC-SHA256 of the service's
secret (``replica-secret`` in the data directory, root's 0600) over the
workload and attempt: the service derives it again whenever it needs it
(after a restart too) and stores it nowhere else. The replica receives it in
its environment (the runner's 0600 ``env.json``; Slurm's 0600 script; the
pod's spec) and ``gpuspawner.serving.mlserver_guarded`` puts ``ReplicaGuard`` in front
of MLServer's REST app: a request without ``X-GpuHub-Replica-Key`` equal to
it gets 401. The model repository API (load/unload) also needs the
service's admin key for the replica (``X-GpuHub-Replica-Admin``), of which
the replica holds only the SHA-256 digest: not even the replica's own
account can unload its model through it. MLServer's gRPC and metrics servers,
which this guard cannot cover, are not started.

A key rather than a Unix socket: the router reaches replicas on other
machines (Slurm nodes, pods) over TCP as well, and one mechanism guards all
of them. The check is one constant-time comparison per request.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import threading
from typing import Optional

KEY_ENV = "GPUHUB_REPLICA_KEY"
KEY_HEADER = "X-GpuHub-Replica-Key"
ADMIN_ENV = "GPUHUB_REPLICA_ADMIN_DIGEST"
ADMIN_HEADER = "X-GpuHub-Replica-Admin"
SECRET_FILE = "replica-secret"
REPOSITORY = re.compile(r"/+v2/+repository(?:/|$)")


def replica_key(secret: bytes, workload_id: str, attempt: int, what: str = "replica") -> str:
    return hmac.new(secret, f"{what} {workload_id} {attempt}".encode(),
                    hashlib.sha256).hexdigest()


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ReplicaKeys:
    """The service's side: the secret in ``data_dir``, made at first use
    (the first replica's start, from either of the service's start threads)."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, SECRET_FILE)
        self._secret: Optional[bytes] = None
        self._lock = threading.Lock()

    @property
    def secret(self) -> bytes:
        with self._lock:
            if self._secret is None:
                self._secret = self._read_or_make()
            return self._secret

    def _read_or_make(self) -> bytes:
        # Written whole under a name of its own, then linked into place: no
        # reader (another thread, another service on this data directory)
        # sees it half written, and if two make one, the first linked wins.
        if not os.path.lexists(self.path):
            made = f"{self.path}.{os.getpid()}.{threading.get_ident()}"
            try:  # left by a service that died writing it, whose pid this one has
                os.unlink(made)
            except FileNotFoundError:
                pass
            fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(os.urandom(32).hex())
                    f.flush()
                    os.fsync(f.fileno())
                os.link(made, self.path)
            except FileExistsError:
                pass
            finally:
                os.unlink(made)
        fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            secret = f.read().strip().encode()
        if len(secret) < 32:
            raise RuntimeError(f"{self.path} holds no usable secret; remove it to make one")
        return secret

    def key(self, workload_id: str, attempt: int) -> str:
        return replica_key(self.secret, workload_id, attempt)

    def headers(self, workload_id: str, attempt: int) -> dict[str, str]:
        return {KEY_HEADER: self.key(workload_id, attempt)}

    def admin_headers(self, workload_id: str, attempt: int) -> dict[str, str]:
        """What the model repository API needs besides the key (nothing in
        the service calls it; an operator or a test may, as root)."""
        return {**self.headers(workload_id, attempt),
                ADMIN_HEADER: replica_key(self.secret, workload_id, attempt, "admin")}

    def env(self, workload_id: str, attempt: int) -> dict[str, str]:
        """What the replica's process gets."""
        return {KEY_ENV: self.key(workload_id, attempt),
                ADMIN_ENV: digest(replica_key(self.secret, workload_id, attempt, "admin"))}


class ReplicaGuard:
    """ASGI middleware: only requests that carry the replica's key pass, and
    to the model repository API only with the admin key too."""

    def __init__(self, app, key: str, admin_digest: str = ""):
        if not key:
            raise ValueError("a replica needs its key")
        self.app = app
        self.key = key.encode()
        self.admin_digest = admin_digest.encode()
        self.header = KEY_HEADER.lower().encode()
        self.admin_header = ADMIN_HEADER.lower().encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):  # lifespan
            return await self.app(scope, receive, send)
        given = admin = b""
        for name, value in scope.get("headers") or ():
            if name == self.header:
                given = value
            elif name == self.admin_header:
                admin = value
        if not hmac.compare_digest(given, self.key):
            return await _refuse(scope, send, 401, b"this model replica answers GPU Hub's "
                                                   b"router only")
        if REPOSITORY.match(scope.get("path", "")) and not (
                self.admin_digest and hmac.compare_digest(
                    hashlib.sha256(admin).hexdigest().encode(), self.admin_digest)):
            return await _refuse(scope, send, 403, b"the model repository API is the "
                                                   b"service's only")
        return await self.app(scope, receive, send)


async def _refuse(scope, send, status: int, message: bytes) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = b'{"error": "' + message + b'"}'
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
