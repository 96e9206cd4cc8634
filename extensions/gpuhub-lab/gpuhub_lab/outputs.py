"""Files of a job in this server's tree: its outputs as a zip, and the
parameters cell of a notebook."""
from __future__ import annotations

import ast
import os
import tempfile
import zipfile
from typing import IO

# A download larger than this is refused rather than filling the disk.
MAX_ZIP_BYTES = 2 << 30


class OutputsTooLarge(Exception):
    pass


def zip_paths(root_dir: str, paths: list[str]) -> IO[bytes]:
    """A temporary file holding a zip of ``paths`` (files or directories,
    relative to ``root_dir``), positioned at its start; names in the archive
    are relative to ``root_dir``."""
    archive = tempfile.TemporaryFile()
    total = 0
    seen: set[str] = set()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in paths:
            full = os.path.join(root_dir, rel)
            files = [full] if os.path.isfile(full) else [
                os.path.join(d, f) for d, _, names in os.walk(full) for f in sorted(names)]
            for path in files:
                name = os.path.relpath(path, root_dir)
                if name in seen or not os.path.isfile(path):
                    continue
                seen.add(name)
                total += os.path.getsize(path)
                if total > MAX_ZIP_BYTES:
                    raise OutputsTooLarge(f"the outputs are larger than {MAX_ZIP_BYTES >> 30} GiB")
                z.write(path, name)
    archive.seek(0)
    return archive


def notebook_parameters(path: str) -> list[dict]:
    """The notebook's ``parameters`` cell as papermill reads it: name,
    default (source text), inferred type (from an annotation), help; and
    ``type``, the type of the default's value when it is a literal (what
    the sweep editor types the values of a grid as)."""
    from papermill.inspection import inspect_notebook

    return [{"name": name, "default": p.get("default", ""),
             "inferred_type_name": p.get("inferred_type_name", ""), "help": p.get("help", ""),
             "type": literal_type(p.get("default", ""))}
            for name, p in inspect_notebook(path).items()]


LITERAL_TYPES = {bool: "bool", int: "int", float: "float", str: "str", list: "list",
                 tuple: "list", dict: "dict", type(None): "none"}


def literal_type(source: str) -> str:
    """"int", "float", "str", "bool", "list", "dict", "none" for a Python
    literal, "expr" for anything else (a call, a name)."""
    try:
        value = ast.literal_eval(source.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return "expr"
    return LITERAL_TYPES.get(type(value), "expr")
