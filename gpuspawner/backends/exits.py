"""Why an attempt ended: the words the runner writes in ``exit.json`` and
the service reads back. Its own module so that the runner, which every
start pays for, imports nothing else of the backends."""

EXITED = "exited"          # the command exited by itself (see returncode)
TIME_LIMIT = "time-limit"  # killed for running past its time limit
STOPPED = "stopped"        # stopped by the service (preemption, cancel, eviction)
LOST = "lost"              # its process is gone and left no exit record
