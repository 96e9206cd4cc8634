"""Starting attempts off the event loop.

A local start forks a supervisor, writes its cgroups and records, and asks
the hub for the attempt's own token: tens of milliseconds, more under load,
which every API request would otherwise wait behind. The ``Starter`` runs
those starts in worker threads (for backends whose start blocks) and keeps
what must be decided on the loop for the loop: a start that failed is
reported at the next cycle (``take``), and a stop or kill asked while the
attempt is still being started is carried out once it has been. An
admission is committed (in the cycle's worker thread) before the loop starts
it: from then on its start is ``expect``ed, so that a stop asked in between
(a cancel that found it running) waits for the start as well.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Callable, Optional

from gpuspawner.backends.base import LaunchSpec

log = logging.getLogger("gpuhub.starts")


class Starter:
    def __init__(self, backend, job_tokens=None, threads: int = 0,
                 wake: Callable[[], None] = lambda: None):
        """``threads`` 0: every start runs in the caller's thread, as tools and
        tests want; else in that many workers (when the backend's start blocks)."""
        self.backend = backend
        self.job_tokens = job_tokens
        self.wake = wake
        self._pool = ThreadPoolExecutor(threads, "gpuhub-start") if threads else None
        self._lock = threading.Lock()
        self._starting: set[tuple[str, int]] = set()
        self._expected: set[tuple[str, int]] = set()  # committed, start not yet asked
        self._asked: dict[tuple[str, int], tuple[str, float]] = {}  # stops asked meanwhile
        self._failed: list[tuple[str, int, str]] = []
        self._done: list[tuple[str, int]] = []
        # Built in a worker (with its token's variables), started on the loop (take).
        self._built: list[tuple[LaunchSpec, Optional[dict]]] = []

    def expect(self, keys: list[tuple[str, int]]) -> None:
        """Attempts about to be committed as admitted, whose start comes
        later (``start``, ``start_built``; ``expected_done`` after)."""
        with self._lock:
            self._expected.update(keys)

    def expected_done(self) -> None:
        """The cycle's starts are asked: the stops asked for an expected
        attempt that was not started after all (its admission was dropped)
        are carried out now."""
        with self._lock:
            left, self._expected = self._expected, set()
            asked = {key: self._asked.pop(key) for key in left if key in self._asked}
        for (wid, attempt), (how, grace) in asked.items():
            self._stop_or_kill(wid, attempt, how, grace)

    def start(self, spec: LaunchSpec) -> None:
        key = (spec.workload_id, spec.attempt)
        with self._lock:
            self._expected.discard(key)
            self._starting.add(key)
        if self._pool is None or not self.backend.blocking_start(spec):
            self._run(spec, in_worker=False)
        else:
            self._pool.submit(self._run, spec, in_worker=True)

    @property
    def in_workers(self) -> bool:
        """Whether starts run in worker threads (else in the caller's)."""
        return self._pool is not None

    def start_built(self, keys: list[tuple[str, int]],
                    build: Callable[[list[str]], dict[str, object]]) -> None:
        """Start what ``build`` makes of the workloads (reading the database
        and the users' files: the launches of a cycle's admissions), in a
        worker thread, their job tokens made together; their starts then go
        to the workers. A launch that cannot be built (``build`` gives why
        instead) is a start that failed (``take``); a backend whose start
        must run on the loop gets the built specs at the next ``take``."""
        with self._lock:
            for key in keys:
                self._expected.discard(key)
                self._starting.add(key)
        self._pool.submit(self._build_and_run, keys, build)

    def _build_and_run(self, keys: list[tuple[str, int]], build) -> None:
        try:
            built = build([wid for wid, _attempt in keys])
        except Exception as err:
            built = {wid: err for wid, _attempt in keys}
        specs = []
        for key in keys:
            spec = built.get(key[0])
            if isinstance(spec, LaunchSpec):
                specs.append(spec)
                continue
            # Its traceback too: the build caught it, so that the others go on.
            log.error("could not start %s: %s", key[0], spec,
                      exc_info=spec if isinstance(spec, BaseException) else None)
            with self._lock:
                self._failed.append((*key, f"could not start: {spec}"))
                self._starting.discard(key)
                self._done.append(key)
        envs = self._token_envs(specs)
        on_loop = []
        for spec in specs:
            env = envs.get((spec.workload_id, spec.attempt))
            if self.backend.blocking_start(spec):
                try:
                    self._pool.submit(self._run, spec, True, env)
                except RuntimeError:  # the pool is shutting down: started here
                    self._run(spec, True, env)
            else:
                on_loop.append((spec, env))
        with self._lock:
            self._built += on_loop
        if on_loop or len(specs) < len(keys):
            self.wake()

    def _token_envs(self, specs: list[LaunchSpec]) -> dict:
        """The specs' job tokens, made in one transaction (empty if that
        fails: each start then makes its own, and fails by itself)."""
        if self.job_tokens is None or not specs:
            return {}
        try:
            return self.job_tokens.env_for_all(specs)
        except Exception:
            log.exception("could not make %d job tokens together", len(specs))
            return {}

    def _run(self, spec: LaunchSpec, in_worker: bool, token_env: Optional[dict] = None) -> None:
        """``token_env``: its job token's variables, made already (else made here)."""
        key = (spec.workload_id, spec.attempt)
        try:
            if token_env is None and self.job_tokens is not None:
                token_env = self.job_tokens.env_for(spec)
            if token_env is not None:
                spec = replace(spec, env={**spec.env, **token_env})
            self.backend.start(spec)
        except Exception as err:  # a job that cannot start fails; others go on
            log.exception("could not start %s", spec.workload_id)
            with self._lock:
                self._failed.append((spec.workload_id, spec.attempt, f"could not start: {err}"))
        finally:
            with self._lock:
                self._starting.discard(key)
                self._done.append(key)
            if in_worker:
                self.wake()

    def stop(self, wid: str, attempt: int, grace: float) -> None:
        self._stop_or_kill(wid, attempt, "stop", grace)

    def kill(self, wid: str, attempt: int) -> None:
        self._stop_or_kill(wid, attempt, "kill", 0.0)

    def _stop_or_kill(self, wid: str, attempt: int, how: str, grace: float) -> None:
        key = (wid, attempt)
        with self._lock:
            if key in self._starting or key in self._expected:
                # Once started, at the next cycle (see take).
                if how == "kill" or key not in self._asked:
                    self._asked[key] = (how, grace)
                return
        if how == "kill":
            self.backend.kill(wid, attempt)
        else:
            self.backend.stop(wid, attempt, grace)

    def take(self) -> list[tuple[str, int, str]]:
        """On the loop, at each cycle: the starts that failed since the last
        call, after carrying out the stops asked while they were starting."""
        with self._lock:
            built, self._built = self._built, []
        for spec, token_env in built:
            self._run(spec, False, token_env)
        with self._lock:
            done, self._done = self._done, []
            failed, self._failed = self._failed, []
            asked = {key: self._asked.pop(key) for key in done if key in self._asked}
        for (wid, attempt), (how, grace) in asked.items():
            self._stop_or_kill(wid, attempt, how, grace)
        return failed

    def recover(self, specs: list[LaunchSpec], broken: list) -> list:
        """The backend's recovery of all attempts at once; if that fails, of
        each alone, so that the one it cannot recover fails by itself
        (appended to ``broken`` with why) and the others are adopted."""
        try:
            return self.backend.recover(specs)
        except Exception:
            log.exception("recovering %d attempts failed; recovering them one by one", len(specs))
        exits = []
        for spec in specs:
            try:
                exits += self.backend.recover([spec])
            except Exception as err:
                log.exception("could not recover %s", spec.workload_id)
                broken.append((spec.workload_id, spec.attempt, f"could not be recovered: {err}"))
        return exits

    def close(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait)
