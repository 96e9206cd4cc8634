"""Sweeps: one job over a parameter grid, its tasks, metrics and REST handlers."""
