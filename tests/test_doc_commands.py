"""The docs as a new user reads them: every link of README.md and docs/*.md
leads to a file of the clone, and every ```bash block is marked on the line
before it: ``<!-- runnable -->`` (it runs as written against a live hub
started as the README says, ``gpuhub up`` on a fresh data directory) or
``<!-- not-runnable: why -->`` (it needs a Kubernetes cluster, a GPU, ...).

The runnable blocks of a document run in its order, as in one terminal: a
block sees the variables (and the activated .venv) of the blocks before it
in the same document. Each starts in the repository's root with only what
the docs ask a reader to have: ``HUB`` (the hub's URL) and ``TOKEN`` (a token
of the first admin from the hub's Token page), ``GPUHUB_DATA_DIR`` standing
for ``make run``'s gpuhub-data, no .venv on the PATH, and, in the admin's
workspace, the train.py and train.ipynb of their own that the examples run."""
from __future__ import annotations

import glob
import os
import re
import subprocess
from typing import NamedTuple

import nbformat
import pytest

from embedded import EmbeddedHub

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
RUNNABLE = "<!-- runnable -->"
NOT_RUNNABLE = re.compile(r"<!-- not-runnable: (\S.*\S) -->")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A block without a language that starts like a shell command should be ```bash.
COMMAND = re.compile(r"^(\$ |gpuhub |make |curl |kubectl |helm |docker |\.venv/|pip |python)")


class Block(NamedTuple):
    doc: str    # relative to the repository
    line: int   # of the ``` line
    marker: str  # the line before it
    code: str

    @property
    def runnable(self) -> bool:
        return self.marker == RUNNABLE


def fenced_blocks(path: str) -> list[tuple[int, str, str, str]]:
    """(line of the opening fence, its language, the line before, code)."""
    lines = open(path).read().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append((i + 1, lines[i][3:].strip(), lines[i - 1].strip() if i else "",
                        "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return out


def bash_blocks(path: str) -> list[Block]:
    return [Block(os.path.relpath(path, ROOT), n, before, code)
            for n, lang, before, code in fenced_blocks(path) if lang == "bash"]


BLOCKS = [b for path in DOCS for b in bash_blocks(path) if b.runnable]


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


@pytest.mark.parametrize("path", DOCS, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_command_block_says_whether_it_runs_here(path):
    doc = os.path.relpath(path, ROOT)
    for line, lang, before, code in fenced_blocks(path):
        if lang == "" and COMMAND.match(code):
            pytest.fail(f"{doc}:{line}: a block of commands is ```bash (and marked)")
        if lang == "bash":
            assert before == RUNNABLE or NOT_RUNNABLE.fullmatch(before), (
                f"{doc}:{line}: put {RUNNABLE} or <!-- not-runnable: why --> on the line "
                f"before this ```bash block (found {before!r})")


def test_the_readme_and_the_serving_quick_start_are_runnable():
    assert {b.doc for b in BLOCKS} >= {"README.md", "docs/serving.md"}


TRAIN_PY = """\
import argparse, os
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=1e-3)
print(f"training with lr={p.parse_args().lr} on GPUs {os.environ['CUDA_VISIBLE_DEVICES']}")
"""


def last_cell_of_train_ipynb() -> str:
    """The cell docs/workflows.md tells a notebook sweep to end with: the
    reader's train.ipynb ends as the doc says."""
    path = os.path.join(ROOT, "docs", "workflows.md")
    (code,) = [code for _, lang, _, code in fenced_blocks(path)
               if lang == "python" and code.startswith("# the last cell of train.ipynb")]
    return code


def the_admins_own_files(hub: EmbeddedHub) -> None:
    """What the docs' examples run: a script and a notebook of the admin's
    in their workspace (theirs at their first submission)."""
    workspace = os.path.join(hub.data_dir, "workspaces", "admin")
    os.makedirs(workspace, exist_ok=True)
    with open(os.path.join(workspace, "train.py"), "w") as f:
        f.write(TRAIN_PY)
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("epochs = 1\nlr = 0.01")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import time\nfor epoch in range(epochs):\n    time.sleep(1)\n"
        "    print(f'epoch {epoch + 1}/{epochs}', flush=True)"),
        nbformat.v4.new_code_cell(last_cell_of_train_ipynb())]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, os.path.join(workspace, "train.ipynb"))


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    hub = EmbeddedHub(str(tmp_path_factory.mktemp("docs")))
    try:
        hub.start()
        the_admins_own_files(hub)
        yield hub
    except BaseException:
        print(f"---- hub log (tail) ----\n{hub.tail(80)}")
        raise
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def terminals(tmp_path_factory):
    """One shell's variables per document: a file each block sources first
    and writes last (what it exported, and the variables it set)."""
    folder = tmp_path_factory.mktemp("terminals")
    return lambda doc: str(folder / doc.replace("/", "_"))


# What a block leaves for the next one: what is exported (not the shell's own
# bookkeeping) and the variables it set.
CARRY = r"""
{ export -p | grep -vE '^declare -x (PWD|OLDPWD|SHLVL|_)='
  for __v in $(comm -13 <(printf '%s\n' $__before | sort) <(compgen -v | sort)); do
    [[ $__v == __* || $__v == BASH* || $__v == FUNCNAME || $__v == PIPESTATUS ]] ||
      declare -p "$__v"
  done; } > "$__terminal"
"""


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.doc}:{b.line}" for b in BLOCKS])
def test_runnable_block_runs_as_written(live, terminals, block):
    venv_bin = os.path.join(ROOT, ".venv", "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUHUB_", "JUPYTERHUB_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if os.path.realpath(p) != os.path.realpath(venv_bin))
    env.update(HUB=live.url, TOKEN=live.token("admin"), GPUHUB_DATA_DIR=live.data_dir)
    terminal = terminals(block.doc)
    script = (f"__before=$(compgen -v); __terminal={terminal}\n"
              f"[ -f \"$__terminal\" ] && . \"$__terminal\"\n{block.code}\n{CARRY}")
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    print(f"---- {block.doc}:{block.line} ----\n{r.stdout}\n{r.stderr}")
    assert r.returncode == 0, (f"{block.doc}:{block.line} failed ({r.returncode}):\n"
                               f"{r.stdout}\n{r.stderr}")
