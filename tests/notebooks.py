"""Notebooks the tests run: a cell tagged ``parameters`` (papermill's) and
the code, with a Python 3 kernel."""
from __future__ import annotations

import os

import nbformat


def write_notebook(path, parameters: str, code: str, title: str = "") -> None:
    """Write the notebook at ``path`` (its folder is made); ``title`` adds a
    markdown cell first."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb.cells = ([nbformat.v4.new_markdown_cell(title)] if title else []) + [
        params, nbformat.v4.new_code_cell(code)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    os.makedirs(os.path.dirname(str(path)) or ".", exist_ok=True)
    nbformat.write(nb, str(path))
