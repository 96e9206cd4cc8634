"""A user's file browser keeps listing a folder while something in it
changes: gpuhub_lab's contents manager (what a local server runs) leaves
out an entry that goes away or cannot be reached mid-listing, where Jupyter
Server's own answered 404 for the whole folder ("Directory not found")."""
from __future__ import annotations

import asyncio
import pytest
from gpuhub_lab.contents import ListingContentsManager
from tornado import web


@pytest.fixture
def manager(tmp_path):
    for name in ("a.txt", "b.txt", "Untitled.ipynb"):
        (tmp_path / name).write_text("{}" if name.endswith(".ipynb") else "x")
    return ListingContentsManager(root_dir=str(tmp_path))


def names(model: dict) -> list[str]:
    return sorted(entry["name"] for entry in model["content"])


def test_a_file_renamed_over_and_over_while_listed_never_fails_the_listing(manager):
    async def lister():
        seen = []
        for _ in range(200):
            seen.append(names(await manager.get("", content=True)))
        return seen

    async def renamer(stop):
        name, other = "Untitled.ipynb", "first.ipynb"
        while not stop.is_set():
            await manager.rename(name, other)
            name, other = other, name
            await asyncio.sleep(0)

    async def main():
        stop = asyncio.Event()
        renaming = asyncio.create_task(renamer(stop))
        try:
            return await lister()
        finally:
            stop.set()
            await renaming

    for listed in asyncio.run(main()):
        assert {"a.txt", "b.txt"} <= set(listed), listed   # never a 404, never a file lost


@pytest.mark.parametrize("path", ["nosuch", "a.txt/inner"])
def test_a_folder_that_is_not_there_is_still_not_found(manager, path):
    with pytest.raises(web.HTTPError) as e:
        asyncio.run(manager.get(path, content=True))
    assert e.value.status_code == 404


def test_an_entry_read_on_its_own_is_read_as_upstream_reads_it(manager):
    model = asyncio.run(manager.get("a.txt", content=True))
    assert model["content"] == "x" and model["type"] == "file"
    with pytest.raises(web.HTTPError):
        asyncio.run(manager.get("gone.txt", content=False))
