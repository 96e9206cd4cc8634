"""The Slurm backend: runs attempts as Slurm batch jobs: sbatch, squeue, scontrol/sacct, scancel.

The scheduler decides and Slurm places exactly there: every job is pinned
with ``--nodelist`` to the nodes of its placement and asks for the placed
number of GPUs per node (``--gres=gpu:N``). Which of a node's GPUs Slurm
binds is Slurm's choice (the GPUs of a pool are interchangeable); Slurm sets
``CUDA_VISIBLE_DEVICES`` for the job and this backend leaves it alone.

A job is found again by its name, ``gpuhub.<workload>.<attempt>``, and by
the job id kept in ``slurm-job.json`` in the attempt directory. Slurm's own
requeue is off (``--no-requeue``): a requeue is the scheduler's decision and
makes a new attempt, never a silent rerun of an old one.

How an attempt ended comes from Slurm's job state (see ``exit_from_state``):
``scontrol show job`` while slurmctld remembers the job (``MinJobAge``),
``sacct`` after that where accounting is on.

As in the local backend, a stop in progress (its hard-cancel deadline) lives
in memory only: after a restart the service re-issues ``stop``.

With users' accounts (``GpuHubService.user_accounts``: the service runs as
root) each job runs as its hub user's cluster account: root submits it with
``sbatch --uid --gid``, so slurmd starts the script as that account and
everything in the job is that user's, as a job submitted by them would be.
The account is made with useradd as for the local backend, or comes from the
directory (LDAP) through ``user_map``/``user_template``. The attempt
directory is root's, group the account's, mode 1770; the script (it holds
the job's token) is root's, mode 0600, read by sbatch only, and Slurm shows
a job's script to its owner and to operators only; the log is made by root,
group-writable for the account, before the directory is handed over.
"""

from .backend import SlurmBackend

__all__ = ["SlurmBackend"]
