"""The contents manager of a user's server on the embedded hub: Jupyter
Server's own (``AsyncLargeFileManager``), except that one entry of a folder
that cannot be read while the folder is listed is left out of the listing
instead of failing the whole folder.

Upstream, listing a folder reads each entry's model in turn, awaiting
between entries; an entry renamed or deleted meanwhile (the Lab renaming an
``Untitled.ipynb`` on its first save, a job writing its outputs) makes that
entry's read answer 404, and so the whole listing: JupyterLab then shows
"Directory not found" for the user's home. CI's first-run browser test met
it once; 34 of 300 listings failed here while one file was renamed over and
over (tests/test_lab_contents.py).
"""
from __future__ import annotations

import contextvars
from typing import Optional

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado import web

# The folder being listed by this request (a task of its own), if any.
_LISTING: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("listing",
                                                                        default=None)
_GONE = object()


class ListingContentsManager(AsyncLargeFileManager):
    async def _dir_model(self, path, content=True):
        if not content:
            return await super()._dir_model(path, content=False)
        token = _LISTING.set(path.strip("/"))
        try:
            model = await super()._dir_model(path, content=True)
        finally:
            _LISTING.reset(token)
        model["content"] = [entry for entry in model["content"] if entry is not _GONE]
        return model

    async def get(self, path, content=True, type=None, format=None, require_hash=False):
        listing = _LISTING.get()
        if listing is None or content or path.strip("/") == listing:
            return await super().get(path, content=content, type=type, format=format,
                                     require_hash=require_hash)
        token = _LISTING.set(None)  # the entry itself is read as usual
        try:
            return await super().get(path, content=False, type=type, format=format,
                                     require_hash=require_hash)
        except web.HTTPError as e:
            if e.status_code != 404:
                raise
            self.log.info("%s went away or cannot be reached while its folder was listed: "
                          "left out", path)
            return _GONE
        finally:
            _LISTING.reset(token)
