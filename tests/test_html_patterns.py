"""Every pattern= attribute of the pages the project serves (panel
templates, the spawn form, the Lab extension) is a valid regular expression
as Chromium compiles it: with the v flag, where a literal '-' in a class
must be escaped (issue 33 item 3: the Teams page's name field logged "not a
valid regular expression" and the browser's own check never ran). Node's
RegExp is Chromium's (V8); tests/test_admin_panel_browser.py checks the
pages themselves."""
from __future__ import annotations

import glob
import html
import json
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["gpuspawner/**/*.html", "gpuspawner/**/*.py", "extensions/gpuhub-lab/src/**/*.tsx",
           "extensions/gpuhub-lab/src/**/*.ts"]
# pattern="..." (HTML, Jinja, an f-string) or pattern={'...'} / pattern="..." in TSX.
ATTRIBUTE = re.compile(r"""\bpattern=(?:\{\s*)?(["'])(.*?)(?<!\\)\1""")


def patterns() -> list[tuple[str, str]]:
    found = []
    for source in SOURCES:
        for path in glob.glob(os.path.join(ROOT, source), recursive=True):
            if "node_modules" in path or "/lib/" in path:
                continue
            text = open(path, encoding="utf-8").read()
            found += [(os.path.relpath(path, ROOT), html.unescape(m.group(2)))
                      for m in ATTRIBUTE.finditer(text)]
    return found


def refused_by_v8(values: list[str]) -> list[str]:
    """The values that `new RegExp(value, "v")` refuses, as an input's pattern is compiled."""
    script = ("const vs = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "console.log(JSON.stringify(vs.filter(v => { try { new RegExp('^(?:' + v + ')$',"
              " 'v'); return false; } catch (e) { return true; } })));")
    out = subprocess.run(["node", "-e", script], input=json.dumps(values), text=True,
                         capture_output=True, check=True, timeout=60).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def node():
    if not shutil.which("node"):
        pytest.skip("no node on the PATH (make setup installs it for the Lab extension): "
                    "cannot compile patterns as Chromium does")


def test_the_checker_refuses_what_chromium_refuses(node):
    assert refused_by_v8(["[a-z0-9][a-z0-9._-]*", "[a-z0-9][a-z0-9._\\-]{0,62}"]) == \
        ["[a-z0-9][a-z0-9._-]*"]


def test_every_pattern_attribute_compiles_with_the_v_flag(node):
    found = patterns()
    assert ("gpuspawner/service/panel/templates/teams.html", "[a-z0-9][a-z0-9._\\-]{0,62}") \
        in found, found
    bad = refused_by_v8([v for _, v in found])
    assert [(f, v) for f, v in found if v in bad] == []
