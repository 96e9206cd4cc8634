"""GPU Hub: one scheduler for the GPU notebooks, jobs and deployments of a JupyterHub."""

__version__ = "0.1.0"
