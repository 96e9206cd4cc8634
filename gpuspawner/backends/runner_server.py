"""Starts the local backend's runners: a process of the service's that forks them.

Each attempt runs under a runner (runner.py). Started as a program of its
own, a runner cost a Python interpreter's start and its imports, about
40 ms of CPU a job, on the cores the service answers requests on. This
helper imports the runner once and forks a copy of itself for each
attempt, which goes straight to ``runner.main`` (about 7 ms of CPU a job,
its command's own start included). And the fork is not the service's:
CPython holds the interpreter's lock (GIL) from a fork until the child has
executed its program, 5-10 ms a start on busy cores in which the service's
event loop answered nobody. The service's start thread waits on a socket
with its lock released.

The server runs, and so its runners run, ``niceness`` lower than the
service (``GpuHubService.start_niceness``): a runner gives its command the
service's priority back before the command runs (runner.py, ``--niceness``).

It is small (standard library and the runner, ``python -I -S``: nothing
from the job's directory or the environment changes what root imports),
starts with the first attempt, lives in a session of its own, and ends when
the service's end of its socket closes: when the backend is dropped or the
service exits, however it exits. The runners are its children, which it
reaps as they end; they are in sessions of their own and outlive it, as they
outlive the service. The service watches them as it watches the runners it
adopts after a restart: by pid and start time (``proc_stat``). A runner runs
the runner code of the service that started it, also when the package on
disk was upgraded since.

A forked runner starts as a started program would: a session of its own,
stdin /dev/null, stdout and stderr the log, ``/`` as cwd, the server's
environment (the runner's: fixed, and nothing of a job's), no descriptor of
the server's, and the signal dispositions of a fresh interpreter (the
server's SIGCHLD handler is undone). Its command line is the server's; its
name, what ``ps -C`` and ``pgrep`` match, is ``gpuhub-runner``.

A request is one frame (4-byte length, JSON ``{"runner": [ARGS...]}``)
with the runner's log as an SCM_RIGHTS descriptor; the answer is
``{"pid": N, "start_ticks": T}`` or ``{"error": "...", "errno": E}``, once
the runner leads its session (before, a stop sent to its group would find
none). A server that ends during a request is not asked again for that
start: the runner may have started, and the start fails instead (the
backend then removes the runner's env.json, and such a runner ends at
once, 126).
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

from . import runner

MAX_FRAME = 16 * 2**20  # a runner's arguments; a job's environment goes through env.json
_HEADER = struct.Struct("!I")
PR_SET_NAME = 15
RUNNER_NAME = b"gpuhub-runner"  # at most 15 bytes
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER_ARGV = (sys.executable, "-I", "-S", "-c",
               f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
               f"from gpuspawner.backends.runner_server import main; main()")


class RunnerServerError(OSError):
    """The server could not start the runner (``errno`` its reason), or is gone."""


class RunnerServer:
    """The service's side: ``start_runner`` asks the server, one request at a time."""

    def __init__(self, env: dict[str, str], niceness: int = 0,
                 argv: tuple[str, ...] = SERVER_ARGV):
        self._argv = (*argv, str(niceness))
        self._env = env
        self._lock = threading.Lock()
        self._server: Optional[subprocess.Popen] = None
        self._socket: Optional[socket.socket] = None

    def start_runner(self, args: list[str], log_fd: int) -> tuple[int, Optional[int]]:
        """Start a runner with ``args`` (runner.py's command line) in a new
        session, stdin /dev/null, stdout and stderr ``log_fd``, in ``/``;
        (pid, start_ticks)."""
        frame = json.dumps({"runner": args}).encode()
        if len(frame) > MAX_FRAME:
            raise RunnerServerError(f"a runner's command line of {len(frame)} bytes is too long")
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
                raise RunnerServerError(f"the runner server ended: {e}") from e
            if answer is None:
                self._drop()
                raise RunnerServerError("the runner server ended")
        if "error" in answer:
            raise RunnerServerError(answer.get("errno") or 0, answer["error"])
        return answer["pid"], answer.get("start_ticks")

    def _connected(self) -> socket.socket:
        if self._server is not None and self._server.poll() is not None:
            self._drop()
        if self._socket is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            with theirs:
                self._server = subprocess.Popen(
                    [*self._argv, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL, cwd="/", start_new_session=True,
                    env=self._env)
            self._socket = ours
        return self._socket

    def _drop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._server is not None:
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None

    def close(self) -> None:
        """End the server (its runners go on)."""
        with self._lock:
            self._drop()

    @property
    def server_pid(self) -> Optional[int]:
        return self._server.pid if self._server is not None else None


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


def fork_runner(request: dict, log_fd: int) -> dict:
    """The server's part: fork one runner; its pid and start time, or why
    not. Answered once the runner leads its session: the service signals
    its process group (pgid = pid) from then on, as after a ``Popen``."""
    ready_read, ready_write = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except OSError as e:  # EAGAIN: the server's pids limit, or the system's
        os.close(ready_read)
        os.close(ready_write)
        return {"error": f"cannot fork a runner: {e.strerror or e}", "errno": e.errno}
    if pid == 0:
        _run_runner(request["runner"], log_fd)  # never returns
    os.close(ready_write)
    try:
        os.read(ready_read, 1)  # the end of the pipe: the child closed it, or ended
    finally:
        os.close(ready_read)
    # Read before this server can reap it: a zombie still has its start time.
    stat = runner.proc_stat(pid)
    return {"pid": pid, "start_ticks": stat[1] if stat else None}


def _run_runner(args: list[str], log_fd: int) -> None:
    """In the forked child: become what a started runner would be, run it, exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # The server's socket, pipe and selector; and the ready pipe, whose
        # end tells the server that this runner leads its session now.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir("/")
        # Its command line is the server's: ps, top and pgrep know it by this name.
        runner.libc().prctl(PR_SET_NAME, RUNNER_NAME, 0, 0, 0)
        try:
            runner.main(args)
            code = 0
        except SystemExit as e:  # as the interpreter would exit
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap() -> None:
    """Every runner that has ended (all this server's children are runners)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    """The server: serve requests on the descriptor in argv[2] until it
    closes, as ``nice`` argv[1] more than the service (its runners too)."""
    os.nice(int(sys.argv[1]))
    runner.libc()  # loaded once, here, for every runner
    sock = socket.socket(fileno=int(sys.argv[2]))
    sock.set_inheritable(False)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    # Children are reaped between requests, never while a start's stat is read.
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
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
                if len(fds) != 1 or not isinstance(request.get("runner"), list):
                    _send(sock, {"error": f"not a runner's request ({len(fds)} descriptors)"})
                    continue
                _send(sock, fork_runner(request, fds[0]))
            except (OSError, ValueError):
                return  # the service's end is gone or broken: nothing more will come
            finally:
                for fd in fds:
                    os.close(fd)
        _reap()
