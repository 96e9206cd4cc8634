"""Records the service and its runners write (``gpuspawner.jsonfile``)."""
import os
import stat

import pytest

from gpuspawner import jsonfile
from gpuspawner.jsonfile import read_json, write_json


@pytest.mark.parametrize("durable, fsyncs", [(True, 1), (False, 0)])
def test_a_record_is_whole_and_of_its_mode_durable_or_not(tmp_path, monkeypatch, durable, fsyncs):
    """An exit record is on disk before it is in place (it must outlast a
    power cut); a process's own records are not fsynced (a cut ends the
    process too), which was 1 to 10 ms of each start. Both are atomic."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(jsonfile.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    path = tmp_path / "exit.json"
    write_json(str(path), {"returncode": 0}, mode=0o600, durable=durable)
    write_json(str(path), {"returncode": 3}, mode=0o600, durable=durable)
    assert read_json(str(path)) == {"returncode": 3}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(synced) == 2 * fsyncs
    assert sorted(os.listdir(tmp_path)) == ["exit.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_record_and_no_temporary_file(tmp_path):
    path = tmp_path / "runner.json"
    write_json(str(path), {"pid": 1})
    with pytest.raises(TypeError):
        write_json(str(path), {"pid": object()}, durable=False)
    assert read_json(str(path)) == {"pid": 1}
    assert sorted(os.listdir(tmp_path)) == ["runner.json"]


def test_the_temporary_file_never_goes_through_a_link(tmp_path, monkeypatch):
    """A job's account can write in its attempt directory: a link it left
    under the next temporary name is not followed, another name is taken."""
    target = tmp_path / "target"
    target.write_text("mine")
    names = iter(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(jsonfile.os, "urandom", lambda n: bytes.fromhex(next(names)))
    os.symlink(target, tmp_path / ".launch.json.aaaaaaaaaaaa")
    write_json(str(tmp_path / "launch.json"), {"pid": 2}, durable=False)
    assert target.read_text() == "mine"
    assert read_json(str(tmp_path / "launch.json")) == {"pid": 2}
