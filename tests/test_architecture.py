"""The shape of the code, checked: who may import whom (the scheduler core
is pure; storage and backends know nothing of the service), and
docs/architecture.md stays true (every package is on its map, every file it
names exists)."""
from __future__ import annotations

import ast
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "gpuspawner")
STDLIB = set(sys.stdlib_module_names)


def imports_of(package: str) -> dict[str, set[str]]:
    """file (relative to gpuspawner/) -> absolute module names it imports."""
    out: dict[str, set[str]] = {}
    base = os.path.join(PACKAGE, package)
    for folder, _dirs, files in os.walk(base):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, PACKAGE)
            module = "gpuspawner." + rel[:-3].replace(os.sep, ".").removesuffix(".__init__")
            if name == "__init__.py":
                module += ".__init__"
            found = set()
            for node in ast.walk(ast.parse(open(path).read(), path)):
                if isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        parent = module.split(".")[:-node.level]
                        found.add(".".join(parent + ([node.module] if node.module else [])))
                    else:
                        found.add(node.module)
            out[rel] = found
    return out


def top(name: str) -> str:
    return name.split(".")[0]


# package -> what it may import besides the standard library and itself
RULES = {
    # The policy core: pure, deterministic, standard library only.
    "scheduler": set(),
    # The simulator drives the same core; YAML for its files, matplotlib for plots.
    "sim": {"gpuspawner.scheduler", "yaml", "matplotlib"},
}
# packages that must not import the service (it is the one place that wires them)
NOT_THE_SERVICE = ("scheduler", "store", "backends", "inventory", "isolation", "sim", "serving",
                   "culler")


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
    roots = [ROOT, PACKAGE, os.path.join(ROOT, "extensions", "gpuhub-lab"),
             os.path.join(ROOT, "extensions", "gpuhub-lab", "gpuhub_lab")]
    absent = sorted(n for n in named if not any(
        os.path.exists(os.path.join(r, n)) or any(
            os.path.exists(os.path.join(r, sub, n)) for sub in packages) for r in roots))
    assert not absent, f"docs/architecture.md names files that do not exist: {absent}"
