"""Keeping users apart on one machine: system accounts (accounts.py) and,
separately, device/memory cgroups (cgroups.py)."""
