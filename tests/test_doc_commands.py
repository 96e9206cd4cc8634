"""The docs as a new user reads them: every link of README.md and docs/*.md
leads to a file of the clone, and every command block marked runnable (an
``<!-- runnable -->`` line before a ```bash block) runs as written against
a live hub started as the README says (``gpuhub up`` on a fresh data
directory), with only HUB and TOKEN set as the docs ask."""
from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest

from embedded import EmbeddedHub

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
MARKER = "<!-- runnable -->"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def runnable_blocks() -> list[tuple[str, int, str]]:
    """(document, line, code) of every block marked runnable, in order."""
    out = []
    for path in DOCS:
        lines = open(path).read().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARKER:
                continue
            assert lines[i + 1].strip() == "```bash", \
                f"{os.path.relpath(path, ROOT)}:{i + 1}: {MARKER} must come right before a ```bash block"
            end = lines.index("```", i + 2)
            out.append((os.path.relpath(path, ROOT), i + 2, "\n".join(lines[i + 2:end])))
    return out


BLOCKS = runnable_blocks()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_links_lead_to_files_of_the_clone(path):
    text = open(path).read()
    assert "../shared" not in text, f"{path} points outside the repository (../shared)"
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
        assert file.startswith(ROOT + os.sep), f"{path}: {target} is outside the repository"
        assert os.path.exists(file), f"{path}: {target} does not exist"


def test_the_readme_and_the_serving_quick_start_are_runnable():
    assert {doc for doc, _, _ in BLOCKS} >= {"README.md", "docs/serving.md"}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    hub = EmbeddedHub(str(tmp_path_factory.mktemp("docs")))
    try:
        hub.start()
        yield hub
    except BaseException:
        print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        hub.stop()


@pytest.mark.parametrize("doc, line, code", BLOCKS, ids=[f"{d}:{n}" for d, n, _ in BLOCKS])
def test_runnable_block_runs_as_written(live, doc, line, code):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUHUB_", "JUPYTERHUB_", "VIRTUAL_ENV"))}
    env.update(HUB=live.url, TOKEN=live.token("admin"))
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    print(f"---- {doc}:{line} ----\n{r.stdout}\n{r.stderr}")
    assert r.returncode == 0, f"{doc}:{line} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
