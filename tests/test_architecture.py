"""The shape of the code, checked: who may import whom (the scheduler core
and the vocabulary are pure; storage, backends and the spawner know nothing
of the service), no import cycles, rooms and files of a readable size, and
docs/architecture.md stays true (every folder is on its map, every module is
named or in a named folder, every file it names exists)."""
from __future__ import annotations

import ast
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "gpuspawner")
STDLIB = set(sys.stdlib_module_names)


def import_statements(module: str, source: str, is_package: bool):
    """(absolute module, the names imported from it, whether only under
    ``if TYPE_CHECKING:``) for every import in ``source``, wherever it stands."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    typing_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, (), id(node) in typing_only
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            yield base, tuple(a.name for a in node.names), id(node) in typing_only


def imports_of(package: str) -> dict[str, set[str]]:
    """file (relative to gpuspawner/) -> absolute module names it imports."""
    return {os.path.relpath(path, PACKAGE): {base for base, _, _ in import_statements(
                module, open(path).read(), is_package)}
            for module, path, is_package in python_files()
            if module == f"gpuspawner.{package}" or module.startswith(f"gpuspawner.{package}.")}


def top(name: str) -> str:
    return name.split(".")[0]


# package -> what it may import besides the standard library and itself
RULES = {
    # The policy core: pure, deterministic, standard library only.
    "scheduler": set(),
    # The simulator drives the same core; YAML for its files, matplotlib for plots.
    "sim": {"gpuspawner.scheduler", "yaml", "matplotlib"},
    # One name per meaning from the API to the launch: parsing and validation only.
    "vocab": {"gpuspawner.scheduler", "gpuspawner.durations", "gpuspawner.isolation.gpu_rules",
              "gpuspawner.isolation.resources"},
}
# packages that must not import the service (it is the one place that wires them)
NOT_THE_SERVICE = ("scheduler", "store", "backends", "inventory", "isolation", "sim", "serving",
                   "culler", "spawner", "vocab", "hub")


@pytest.mark.parametrize("package", sorted(RULES))
def test_pure_packages_import_only_what_they_may(package):
    allowed = RULES[package] | {f"gpuspawner.{package}"}
    wrong = {f"{f}: {m}" for f, ms in imports_of(package).items() for m in ms
             if top(m) not in STDLIB and m != "__future__"
             and not any(m == a or m.startswith(a + ".") for a in allowed)}
    assert not wrong, f"{package}/ imports what it must not: {sorted(wrong)}"


@pytest.mark.parametrize("package", NOT_THE_SERVICE)
def test_nothing_below_the_service_imports_it(package):
    wrong = {f"{f}: {m}" for f, ms in imports_of(package).items() for m in ms
             if m.startswith("gpuspawner.service")}
    assert not wrong, f"{package}/ imports the service: {sorted(wrong)}"


def test_the_architecture_map_names_every_package_and_only_files_that_exist():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    packages = sorted(d for d in os.listdir(PACKAGE)
                      if os.path.isfile(os.path.join(PACKAGE, d, "__init__.py")))
    missing = [p for p in packages if f"`gpuspawner/{p}/`" not in text]
    assert not missing, f"docs/architecture.md's map lacks {missing}"
    named = set(re.findall(r"`([\w/.-]+\.(?:py|ts|tsx))`", text))
    # a file is named by any tail of its path (`launch.py`, `loop/launch.py`)
    tree = list(project_files("gpuspawner", "extensions/gpuhub-lab", "scripts", "tests"))
    absent = sorted(n for n in named if not any(p == n or p.endswith("/" + n) for p in tree))
    assert not absent, f"docs/architecture.md names files that do not exist: {absent}"


LAB = os.path.join(ROOT, "extensions", "gpuhub-lab", "gpuhub_lab")
SOURCES = {"gpuspawner": PACKAGE, "gpuhub_lab": LAB}
SKIPPED_DIRS = {"__pycache__", "labextension", "node_modules", "templates", "static"}


def project_files(*folders: str):
    """Paths (from the repository's root) of the files under ``folders``."""
    for top in folders:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            yield from (os.path.relpath(os.path.join(folder, n), ROOT) for n in files)


def python_files():
    """(dotted module name, path, is a package's __init__) of every module."""
    for top_name, base in SOURCES.items():
        for folder, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, os.path.dirname(base))
                    yield (rel[:-3].replace(os.sep, ".").removesuffix(".__init__"), path,
                           name == "__init__.py")


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports_in(module: str, source: str, is_package: bool, modules) -> set[str]:
    """The modules of ``modules`` that ``module`` imports anywhere in its body
    (imports inside functions count: they only hide a cycle; those under
    ``if TYPE_CHECKING:`` never run)."""
    def known(name: str):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = set()
    for base, names, typing_only in import_statements(module, source, is_package):
        if not typing_only:
            edges.update(known(f"{base}.{n}") if f"{base}.{n}" in modules else known(base)
                         for n in names or ("",))
    return edges - {None, module}


@pytest.mark.parametrize("source, expected", [
    ("from . import b", {"p.b"}),
    ("def f():\n    from .b import x", {"p.b"}),
    ("import p.b.inner", {"p.b"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X", set()),
    ("from .. import c", set()),  # outside the project: not an edge
    ("import json", set()),
])
def test_an_import_anywhere_in_a_module_is_an_edge(source, expected):
    assert imports_in("p.a", source, False, {"p", "p.a", "p.b"}) == expected


def import_graph() -> dict[str, set[str]]:
    files = {m: (p, pkg) for m, p, pkg in python_files()}
    return {m: imports_in(m, open(p).read(), pkg, files) for m, (p, pkg) in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
])
def test_cycles_finds_every_loop_of_two_or_more_modules(graph, expected):
    assert cycles(graph) == expected


def test_no_module_imports_itself_through_others():
    found = cycles(import_graph())
    assert not found, ("import cycles (function-level imports included; break them by moving "
                       f"what both need into a third module): {found}")


MAX_MODULES_PER_FOLDER = 15
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 5
MAX_CORE_CLASS_LINES = 350
# Migrations are history: once shipped they are never edited, whatever their length.
FROZEN = os.path.join("store", "migrations", "versions")


def source_files():
    for _module, path, _pkg in python_files():
        if FROZEN not in path:
            yield path


def test_no_folder_holds_more_than_15_modules_directly():
    crowded = {}
    for folder in {os.path.dirname(p) for p in source_files()}:
        count = sum(1 for n in os.listdir(folder) if n.endswith(".py") and n != "__init__.py")
        if count > MAX_MODULES_PER_FOLDER:
            crowded[os.path.relpath(folder, ROOT)] = count
    assert not crowded, f"folders with more than {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_no_file_is_over_600_lines():
    long_files = {os.path.relpath(p, ROOT): n for p in source_files()
                  if (n := open(p).read().count("\n")) > MAX_FILE_LINES}
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}"


def test_at_most_5_functions_are_over_60_lines():
    long_functions = sorted(
        (node.end_lineno - node.lineno + 1, f"{os.path.relpath(p, ROOT)}:{node.name}")
        for p in source_files() if p.startswith(PACKAGE)
        for node in ast.walk(ast.parse(open(p).read()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES)
    assert len(long_functions) <= MAX_LONG_FUNCTIONS, (
        f"{len(long_functions)} functions over {MAX_FUNCTION_LINES} lines "
        f"(at most {MAX_LONG_FUNCTIONS}): {long_functions[::-1]}")


def test_no_class_of_the_scheduler_core_is_over_350_lines():
    big = {f"{os.path.relpath(p, ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
           for p in source_files() if p.startswith(os.path.join(PACKAGE, "scheduler"))
           for node in ast.walk(ast.parse(open(p).read()))
           if isinstance(node, ast.ClassDef)
           and node.end_lineno - node.lineno + 1 > MAX_CORE_CLASS_LINES}
    assert not big, f"scheduler classes over {MAX_CORE_CLASS_LINES} lines: {big}"


def test_the_architecture_map_names_every_folder_and_every_loose_module():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    folders = sorted({os.path.relpath(os.path.dirname(p), ROOT) + "/"
                      for p in source_files() if p.startswith(PACKAGE)} - {"gpuspawner/"})
    # a folder is named by its path, or by its own name in its parent's row (`kubernetes/`)
    unnamed = [f for f in folders if f"`{f}`" not in text
               and f"`{f.removeprefix('gpuspawner/')}`" not in text
               and f"`{f.rstrip('/').rpartition('/')[2]}/`" not in text]
    assert not unnamed, f"docs/architecture.md names no such folder: {unnamed}"
    loose = sorted(n for n in os.listdir(PACKAGE) if n.endswith(".py") and n != "__init__.py")
    unmentioned = [n for n in loose if n not in text]
    assert not unmentioned, ("modules of gpuspawner/ itself that docs/architecture.md does not "
                             f"mention: {unmentioned}")


# Feature rooms of the service that reach the loop only through its facades
# (service/loop/facades.py: Records, ClusterView, Submissions, Paths; the
# admins' operations Steering) and what the app wires for them, never the
# Engine. Only the loop itself, the app's wiring and the API's handlers
# (api/: the service's front door, which hands each room its facade) hold it.
FACADE_ROOMS = ("schedules", "sweeps", "serving", "sharing", "whatif", "access", "teams", "datasets",
                "workloads", "panel")


def engine_uses(source: str) -> list[str]:
    """Where a module names the engine: an import of loop.engine, or any
    name, attribute or parameter called ``engine``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("loop.engine"):
            found.append(f"line {node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Name) and node.id == "engine" \
                or isinstance(node, ast.Attribute) and node.attr == "engine" \
                or isinstance(node, ast.arg) and node.arg == "engine":
            found.append(f"line {node.lineno}: names engine")
    return found


@pytest.mark.parametrize("source, named", [
    ("def f(engine):\n    return engine.store\n", True),
    ("class H:\n    def get(self):\n        return self.engine.clock()\n", True),
    ("from gpuspawner.service.loop.engine import Engine\n", True),
    ("def f(records):\n    return records.store\n", False),
    ("from sqlalchemy.engine import make_url\n", False),
])
def test_engine_uses_finds_every_way_a_module_reaches_the_engine(source, named):
    assert bool(engine_uses(source)) is named


@pytest.mark.parametrize("room", FACADE_ROOMS)
def test_a_feature_room_reaches_the_loop_only_through_its_facades(room):
    folder = os.path.join(PACKAGE, "service", room)
    uses = {f"{room}/{n}": found for n in sorted(os.listdir(folder)) if n.endswith(".py")
            if (found := engine_uses(open(os.path.join(folder, n)).read()))}
    assert not uses, f"service/{room} names the Engine (give it a facade instead): {uses}"


def mixed_in_bases(source: str) -> list[str]:
    """Classes that take behaviour from another class of their own module or
    package (a mixin), as ``class Engine(Requests)`` did: only framework
    bases (Exception, Protocol, tornado's handlers) are named outright."""
    allowed = {"Exception", "ValueError", "Protocol", "object"}
    return [f"{node.name}({', '.join(ast.unparse(b) for b in node.bases)})"
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)
            and any(ast.unparse(b) not in allowed for b in node.bases)]


@pytest.mark.parametrize("source, mixed", [
    ("class Engine(Requests):\n    pass\n", True),
    ("class Engine:\n    pass\n", False),
    ("class Skipped(Exception):\n    pass\n", False),
])
def test_mixed_in_bases_finds_a_class_built_from_another(source, mixed):
    assert bool(mixed_in_bases(source)) is mixed


def test_the_loop_and_the_feature_rooms_compose_instead_of_mixing_in():
    """The Engine holds its parts (Submitting, Withdrawals, the facades);
    no class of the loop or a room's logic inherits one (the API's and the
    panel's handlers follow tornado's idiom and are left out)."""
    service = os.path.join(PACKAGE, "service")
    rooms = ["loop", *FACADE_ROOMS]
    mixed = {f"{room}/{n}": found for room in rooms
             for n in sorted(os.listdir(os.path.join(service, room))) if n.endswith(".py")
             and n not in ("api.py", "endpoints.py", "page.py", "pages.py", "base.py",
                           "whatif_pages.py")
             if (found := mixed_in_bases(open(os.path.join(service, room, n)).read()))}
    assert not mixed, f"classes built by inheritance in the service's rooms: {mixed}"
