"""Starts the local backend's runners from a helper process of their own.

Why not ``subprocess.Popen`` in the service: CPython holds the interpreter's
lock (GIL) from the fork until the child has executed its program. Quiet,
that is half a millisecond; on two cores busy with a storm of starts the
child waits for a CPU, and each start held the service's GIL for 5-10 ms in
which its event loop answered nobody (py-spy: a quarter of the GIL's time
while 600 jobs started was ``_fork_exec``). The helper is another
interpreter with its own lock; the service's start thread waits on a socket
with its lock released.

The helper runs, and so starts its runners, ``niceness`` lower than the
service (``GpuHubService.start_niceness``): a runner gives its command the
service's priority back before the command runs (runner.py, ``--niceness``).

The helper is small (standard library and this module, ``python -I -S``),
starts with the first attempt, lives in a session of its own, and ends when
the service's end of its socket closes: when the backend is dropped or the
service exits, however it exits. The runners are its children, which it
reaps as they end; they are in sessions of their own and outlive it, as they
outlive the service. The service watches them as it watches the runners it
adopts after a restart: by pid and start time (``proc_stat``).

A request is one frame (4-byte length, JSON ``{"argv": [...], "env": {...}}``)
with the runner's log as an SCM_RIGHTS descriptor; the answer is
``{"pid": N, "start_ticks": T}`` or ``{"error": "...", "errno": E}``. A
helper that ends during a request is not asked again for that start: the
runner may have started, and the start fails instead (the backend then
removes the runner's env.json, and such a runner ends at once, 126).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Optional

from .runner import proc_stat

MAX_FRAME = 16 * 2**20  # a runner's argv and environment; a job's own goes through env.json
_HEADER = struct.Struct("!I")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER_ARGV = (sys.executable, "-I", "-S", "-c",
               f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
               f"from gpuspawner.backends.launcher import main; main()")


class LauncherError(OSError):
    """The helper could not start the program (``errno`` its reason), or is gone."""


class Launcher:
    """The service's side: ``spawn`` asks the helper, one request at a time."""

    def __init__(self, niceness: int = 0, argv: tuple[str, ...] = HELPER_ARGV):
        self._argv = (*argv, str(niceness))
        self._lock = threading.Lock()
        self._helper: Optional[subprocess.Popen] = None
        self._socket: Optional[socket.socket] = None

    def spawn(self, argv: list[str], env: dict[str, str], log_fd: int) -> tuple[int, Optional[int]]:
        """Start ``argv`` in a new session, with ``env``, stdin /dev/null,
        stdout and stderr ``log_fd``, in ``/``; (pid, start_ticks)."""
        frame = json.dumps({"argv": argv, "env": env}).encode()
        if len(frame) > MAX_FRAME:
            raise LauncherError(f"a runner's command line of {len(frame)} bytes is too long")
        with self._lock:
            sock = self._connected()
            try:
                message = _HEADER.pack(len(frame)) + frame
                sent = sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                 struct.pack("i", log_fd))])
                sock.sendall(message[sent:])
                answer = _receive(sock)
            except OSError as e:
                self._drop()
                raise LauncherError(f"the launcher ended: {e}") from e
            if answer is None:
                self._drop()
                raise LauncherError("the launcher ended")
        if "error" in answer:
            raise LauncherError(answer.get("errno") or 0, answer["error"])
        return answer["pid"], answer.get("start_ticks")

    def _connected(self) -> socket.socket:
        if self._helper is not None and self._helper.poll() is not None:
            self._drop()
        if self._socket is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with theirs:
                self._helper = subprocess.Popen(
                    [*self._argv, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL, cwd="/", start_new_session=True,
                    env={"PATH": os.defpath})
            self._socket = ours
        return self._socket

    def _drop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._helper is not None:
            try:
                self._helper.wait(5)
            except subprocess.TimeoutExpired:
                self._helper.kill()
                self._helper.wait()
            self._helper = None

    def close(self) -> None:
        """End the helper (its runners go on)."""
        with self._lock:
            self._drop()

    @property
    def helper_pid(self) -> Optional[int]:
        return self._helper.pid if self._helper is not None else None


def _receive(sock: socket.socket, fds: Optional[list] = None) -> Optional[dict]:
    """One frame (None at the end of the stream); with ``fds``, the
    descriptors that came with it are appended there."""
    header = _read(sock, _HEADER.size, fds)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise OSError(f"a frame of {size} bytes")
    body = _read(sock, size, None)
    if body is None:
        return None
    return json.loads(body)


def _read(sock: socket.socket, size: int, fds: Optional[list]) -> Optional[bytes]:
    data = b""
    while len(data) < size:
        if fds is not None and not data:
            chunk, ancillary, _, _ = sock.recvmsg(size, socket.CMSG_SPACE(4 * 4),
                                                  socket.MSG_CMSG_CLOEXEC)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.extend(struct.unpack(f"{len(payload) // 4}i",
                                             payload[:len(payload) - len(payload) % 4]))
        else:
            chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _send(sock: socket.socket, answer: dict) -> None:
    body = json.dumps(answer).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def spawn_one(request: dict, log_fd: int, started: dict[int, subprocess.Popen]) -> dict:
    """The helper's part: start one program (kept in ``started`` until it is
    reaped); its pid and start time, or why not.

    ``Popen``, not ``os.posix_spawn``: glibc's posix_spawn leaves its own
    internal signals (32, 33) ignored in the child, and ignored they stay
    through every exec down to the job's command."""
    argv, env = request["argv"], request["env"]
    try:
        child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log_fd,
                                 stderr=log_fd, start_new_session=True)
    except OSError as e:
        return {"error": f"{argv[0]}: {e.strerror or e}", "errno": e.errno}
    started[child.pid] = child
    # Read before this helper can reap it: a zombie still has its start time.
    stat = proc_stat(child.pid)
    return {"pid": child.pid, "start_ticks": stat[1] if stat else None}


def _reap(started: dict[int, subprocess.Popen]) -> None:
    for pid, child in list(started.items()):
        if child.poll() is not None:
            del started[pid]


def main() -> None:
    """The helper: serve spawn requests on the descriptor in argv[2] until it
    closes, as ``nice`` argv[1] more than the service (what it starts too)."""
    os.nice(int(sys.argv[1]))
    sock = socket.socket(fileno=int(sys.argv[2]))
    sock.set_inheritable(False)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    # Children are reaped between requests, never while a start's stat is read.
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    started: dict[int, subprocess.Popen] = {}
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_read:
                while True:
                    try:
                        if not os.read(wake_read, 512):
                            break
                    except BlockingIOError:
                        break
                continue
            fds: list[int] = []
            try:
                request = _receive(sock, fds)
                if request is None:
                    return
                if len(fds) != 1:
                    _send(sock, {"error": f"a request came with {len(fds)} descriptors, not 1"})
                    continue
                _send(sock, spawn_one(request, fds[0], started))
            except (OSError, ValueError):
                return  # the service's end is gone or broken: nothing more will come
            finally:
                for fd in fds:
                    os.close(fd)
        _reap(started)
