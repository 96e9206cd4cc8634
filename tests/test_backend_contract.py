"""The backend contract (gpuspawner/backends/base.py's Backend): a backend
missing one of the methods every backend implements is refused when its
class is defined, not when the engine first calls it; every backend answers
each method with the contract's type; what a backend can do is declared as
class attributes, and the share watch reads them instead of probing."""
from __future__ import annotations

import inspect
import typing

import pytest
from traitlets.config import LoggingConfigurable

from gpuspawner.backends.base import CAPABILITIES, REQUIRED, Backend, LaunchSpec, Started
from gpuspawner.backends.kubernetes.backend import KubernetesBackend
from gpuspawner.backends.local import LocalBackend
from gpuspawner.backends.pools import PoolBackends
from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.bench.sweeps import _StartsNothing
from gpuspawner.scheduler import model as scheduler_model

BACKENDS = [LocalBackend, KubernetesBackend, SlurmBackend, PoolBackends, _StartsNothing]


def complete(**methods) -> dict:
    """A backend's body with every required method, ``methods`` replacing some."""
    body = {"start": lambda self, spec: Started(spec.workload_id, spec.attempt, "x"),
            "stop": lambda self, wid, attempt, grace: None,
            "kill": lambda self, wid, attempt: None,
            "poll": lambda self: [], "recover": lambda self, specs: []}
    body.update(methods)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize("missing", REQUIRED)
@pytest.mark.parametrize("bases", [(Backend,), (LoggingConfigurable, Backend)],
                         ids=["plain", "traitlets-configurable"])
def test_a_backend_without_a_required_method_is_refused_when_it_is_defined(missing, bases):
    with pytest.raises(TypeError, match=f"backend Half does not implement {missing} "):
        type("Half", bases, complete(**{missing: None}))


def test_a_complete_backend_is_defined_and_its_start_names_the_attempt():
    Whole = type("Whole", (Backend,), complete())
    spec = LaunchSpec("w1", 2, ("true",), "/tmp/a", "/tmp")
    assert Whole().start(spec) == Started("w1", 2, "x")
    assert not Whole.names_attempt_pids and Whole().attempt_pids("w1", 2) is None


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_a_capability_is_declared_true_or_false(capability):
    with pytest.raises(TypeError, match=f"{capability} must be declared True or False"):
        type("Vague", (Backend,), {**complete(), capability: "yes"})


def contract_methods() -> list[str]:
    return [name for name, f in vars(Backend).items()
            if inspect.isfunction(f) and not name.startswith("_")]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", contract_methods())
def test_every_backend_answers_each_method_with_the_contracts_type(backend, method):
    ours = getattr(backend, method)

    def returns(fn):
        # The contract names the scheduler's types for type checkers only
        # (a job's runner imports backends/base.py): resolved with them here.
        return typing.get_type_hints(fn, localns=vars(scheduler_model)).get("return")
    if ours is getattr(Backend, method) or not returns(ours):
        return  # inherited, or not annotated (the contract's holds)
    assert returns(ours) == returns(getattr(Backend, method)), f"{backend.__name__}.{method}"


@pytest.mark.parametrize("backend, starts_off_loop, names_attempt_pids", [
    (LocalBackend, True, True),
    (KubernetesBackend, False, False),
    (SlurmBackend, True, False),
    (_StartsNothing, False, False),
], ids=lambda v: getattr(v, "__name__", None))
def test_each_backend_declares_what_it_can_do(backend, starts_off_loop, names_attempt_pids):
    assert vars(Backend)["starts_off_loop"] is False  # the contract's default
    assert (backend.starts_off_loop, backend.names_attempt_pids) == (
        starts_off_loop, names_attempt_pids)


class Pids(Backend):
    names_attempt_pids = True

    def __init__(self, pids):
        self.pids = pids

    start = stop = kill = lambda self, *a: None
    poll = recover = lambda self, *a: []

    def attempt_pids(self, workload_id, attempt):
        return self.pids.get((workload_id, attempt))


class NoPids(Pids):
    names_attempt_pids = False


@pytest.mark.parametrize("members, expected, named", [
    ({"a": Pids({("w1", 0): frozenset({7})}), "b": NoPids({("w1", 0): frozenset({8})})},
     frozenset({7}), True),
    ({"a": NoPids({("w1", 0): frozenset({8})})}, None, False),  # not declared: not asked
    ({"a": Pids({}), "b": Pids({("w1", 0): frozenset({9})})}, frozenset({9}), True),
])
def test_pools_ask_only_the_backends_that_name_attempt_pids(members, expected, named):
    pools = PoolBackends(members)
    assert pools.names_attempt_pids is named
    assert pools.attempt_pids("w1", 0) == expected
