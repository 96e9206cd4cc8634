"""``%gpuhub`` in a real IPython shell against a real hub and service: a
notebook in the kernel's folder is submitted with parameters, its output is
followed to the end, and errors are printed for the cell rather than raised."""
from __future__ import annotations

import pathlib
import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

from hub_harness import Hub
from notebooks import write_notebook


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(str(tmp_path_factory.mktemp("magichub")), groups={"team-a": ["alice"]},
            teams={"a": {"quotas": {"default": {"nominal": 2, "borrowing_limit": 0}}}})
    try:
        yield h.start()
    finally:
        h.stop()


@pytest.fixture
def folder(hub):
    """alice's notebook folder, in her workspace."""
    return pathlib.Path(hub.workspace_folder("alice"))


@pytest.fixture
def shell(hub, folder, monkeypatch):
    """alice's kernel: the hub's environment, working in her notebook's folder."""
    monkeypatch.setenv("GPUHUB_URL", f"{hub.url}/services/gpuhub")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token("alice"))
    monkeypatch.delenv("GPUHUB_TOKEN", raising=False)
    monkeypatch.chdir(folder)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gpuspawner.magic")
    yield ip
    InteractiveShell.clear_instance()


def test_submit_a_notebook_follow_it_and_list_it(shell, folder, capfd):
    write_notebook(folder / "train.ipynb", "epochs = 1", 'print(f"trained {epochs} epochs")')

    shell.run_line_magic("gpuhub", "submit --gpus 1 --name nb-magic -f --notebook train.ipynb "
                                   "-p epochs 4")
    out = capfd.readouterr().out
    wid = out.splitlines()[0].strip()
    assert re.fullmatch(r"w[0-9a-f]+", wid), out
    assert "trained 4 epochs" in out

    shell.run_line_magic("gpuhub", "ls --all")
    table = capfd.readouterr().out
    row = [line for line in table.splitlines() if wid in line]
    assert row and "succeeded" in row[0] and "nb-magic" in row[0], table


def test_errors_are_printed_for_the_cell_not_raised(shell, capfd):
    shell.run_line_magic("gpuhub", "submit --gpus 9 -- python -c pass")
    err = capfd.readouterr().err
    assert "gpuhub submit:" in err and "9" in err, err

    shell.run_line_magic("gpuhub", "submit --bogus")
    assert "unrecognized arguments: --bogus" in capfd.readouterr().out

    shell.run_line_magic("gpuhub", "")
    assert "submit" in capfd.readouterr().out  # the help



def test_a_sweep_and_a_job_after_it_from_the_magic(shell, hub, folder, capfd):
    write_notebook(folder / "train.ipynb", "epochs = 1", 'print(f"trained {epochs} epochs")')
    (folder / "grid.yaml").write_text("tasks:\n  - {epochs: 1}\n  - {epochs: 2}\n")

    shell.run_line_magic("gpuhub", "submit --sweep grid.yaml --max-running 1 --gpus 0 "
                                   "--notebook train.ipynb")
    sid = capfd.readouterr().out.splitlines()[0].strip()
    assert re.fullmatch(r"s[0-9a-f]{12}", sid)
    shell.run_line_magic("gpuhub", f"submit --after {sid}:any --gpus 0 -- python -c pass")
    after = capfd.readouterr().out.splitlines()[0].strip()
    alice = hub.client("alice")
    assert alice.wait(after, "succeeded", timeout=120)["state"] == "succeeded"
    shell.run_line_magic("gpuhub", f"sweep show {sid}")
    out = capfd.readouterr().out
    assert out.splitlines()[0].startswith(f"{sid} succeeded: 2/2 done"), out
    assert [line.split()[:3] for line in out.splitlines()[2:]] == [["0", "1", "succeeded"],
                                                                  ["1", "2", "succeeded"]]


def test_a_schedule_from_a_cell(shell, folder, capfd):
    write_notebook(folder / "report.ipynb", "day = 'monday'", 'print(f"report for {day}")')

    shell.run_line_magic("gpuhub", "schedule create weekly --cron '0 6 * * MON' --gpus 0 "
                                   "--notebook report.ipynb -p day friday")
    out = capfd.readouterr().out
    sid = re.match(r"(c[0-9a-f]{12})  weekly", out).group(1)
    shell.run_line_magic("gpuhub", f"schedule run {sid}")
    wid = capfd.readouterr().out.strip()
    shell.run_line_magic("gpuhub", f"logs -f {wid}")
    assert "report for friday" in capfd.readouterr().out
    shell.run_line_magic("gpuhub", "schedule ls")
    out = capfd.readouterr().out
    assert "0 6 * * MON" in out and "notebook report.ipynb (day=friday)" in out, out
    shell.run_line_magic("gpuhub", f"schedule show {sid}")
    shown = capfd.readouterr().out
    assert wid in shown and "manual" in shown, shown

    shell.run_line_magic("gpuhub", "schedule create bad --cron '0 25 * * *' --notebook report.ipynb")
    assert "cron hour field: 25 is out of 0-23" in capfd.readouterr().err


def test_a_deployment_after_a_job_from_a_cell_and_its_cancel(shell, hub, folder, capfd):
    """`%gpuhub deploy NAME DIR --after JOB` as `gpuhub deploy --after`: the
    revision waits (no replicas) for the job; the model folder is the
    notebook's; `%gpuhub deployments NAME cancel` cancels the waiting revision."""
    shell.run_line_magic("gpuhub", "submit --gpus 0 --name train -- sleep 120")
    wid = capfd.readouterr().out.splitlines()[0].strip()
    shell.run_line_magic("gpuhub", f"deploy best models/best --after {wid}:ok")
    out = capfd.readouterr()
    assert "endpoint:" in out.out, out
    row = [line.split() for line in out.out.splitlines() if line.startswith("a/best")]
    assert row and row[0][:5] == ["a/best", "1", "0%", "waiting", "0/0"], out.out
    assert row[0][-1] == str(folder / "models" / "best")  # the notebook's folder, not the home
    assert f"a/best: revision 1 is waiting for {wid} (ok)" in out.out

    shell.run_line_magic("gpuhub", "deployments best cancel")
    out = capfd.readouterr().out
    assert "a/best: revision 1 cancelled by alice; nothing deployed" in out, out
    alice = hub.client("alice")
    assert alice.workload(wid)["state"] in ("queued", "running")  # the job runs on
    shell.run_line_magic("gpuhub", "deployments best cancel")
    assert "a/best has no waiting revision to cancel" in capfd.readouterr().err
    shell.run_line_magic("gpuhub", f"cancel {wid}")
    shell.run_line_magic("gpuhub", "deployments best delete")
    capfd.readouterr()
