"""Keeping users apart on one machine: system accounts (``accounts``), and
which GPUs and how much memory and CPU a server, job or replica may use
(``gpu_rules``, pure; ``cgroups``, the kernel side)."""
