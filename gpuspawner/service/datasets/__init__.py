"""Datasets: folders a team's lead registers under a name and shares
read-only with other teams; workloads ask for them and see them at
``/datasets/<name>`` (registry.py, api.py; the rules: vocab/datasets.py)."""
