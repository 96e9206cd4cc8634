"""A real LD_PRELOAD library for the tests: compiled with gcc, it leaves a
file ``uid-<UID>-pid-<PID>`` in its marker directory in every process the
dynamic loader loads it into. A marker of uid 0 is user code run as root."""
from __future__ import annotations

import os
import subprocess

SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void gpuhub_test_loaded(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/uid-%d-pid-%d", MARKER_DIR, (int)getuid(), (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}
"""


def build(directory: str) -> tuple[str, str]:
    """(the library, its marker directory) under ``directory``, which other
    accounts must be able to pass through; both reachable by every account."""
    markers = os.path.join(directory, "markers")
    os.makedirs(markers, exist_ok=True)
    os.chmod(markers, 0o1777)  # every account leaves its markers; none removes another's
    source, library = os.path.join(directory, "marker.c"), os.path.join(directory, "marker.so")
    with open(source, "w") as f:
        f.write(SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", library, f'-DMARKER_DIR="{markers}"',
                    source], check=True, capture_output=True)
    os.chmod(library, 0o755)
    return library, markers


def loaded_by(markers: str) -> set[int]:
    """The uids of the processes that loaded the library so far."""
    return {int(name.split("-")[1]) for name in os.listdir(markers)}
