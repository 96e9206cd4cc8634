"""``python -m gpuspawner.notebook_job NB OUT PARAMETERS_JSON``: a notebook
job, run with papermill the way ``papermill --log-output -k python3`` does,
but with the kernel on IPC transport (Unix sockets in a private temporary
directory) instead of TCP on localhost.

Over TCP every kernel starts with "IPKernelApp WARNING | Kernel is running
over TCP without encryption" in the job's log, and its ports are open to
every user of a shared host; Unix sockets in a 0700 directory are neither.
Exit status: 0 when every cell ran, 1 when one raised (papermill's
traceback is in the log), 138 when the kernel died (as papermill's CLI).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import traceback


def kernel_config(socket_dir: str):
    """The KernelManager settings for IPC sockets under ``socket_dir`` (kept
    short: a Unix socket path has a limit of about 100 bytes)."""
    from traitlets.config import Config
    return Config({"KernelManager": {"transport": "ipc",
                                     "ip": os.path.join(socket_dir, "kernel")}})


def quiet_shutdown_manager():
    """The kernel manager class of a notebook job: jupyter_client 8.10 and
    later interrupt a kernel before shutting it down, which makes ipykernel
    log "[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel." into a
    job that succeeded. A job's kernel has finished its cells when it is shut
    down, so that interrupt is skipped; a cell's timeout still interrupts."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdown(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if getattr(self, "shutting_down", False):
                return
            await super()._async_interrupt_kernel()

        interrupt_kernel = _async_interrupt_kernel
    return QuietShutdown


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m gpuspawner.notebook_job NB.ipynb OUT.ipynb PARAMETERS_JSON",
              file=sys.stderr)
        return 2
    notebook, output, params = argv
    parameters = json.loads(params or "{}")
    import nbclient.exceptions
    import papermill
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    socket_dir = tempfile.mkdtemp(prefix="gpuhub-kernel-")  # mode 0700
    try:
        papermill.execute_notebook(notebook, output, parameters=parameters, kernel_name="python3",
                                   log_output=True, progress_bar=False,
                                   config=kernel_config(socket_dir),
                                   kernel_manager_class=quiet_shutdown_manager())
    except nbclient.exceptions.DeadKernelError:
        traceback.print_exc()
        return 138
    except papermill.PapermillExecutionError as e:
        print(e, file=sys.stderr)  # the cell's traceback, as papermill's CLI shows it
        return 1
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
