"""The scheduler service: wires the core, the store, the inventory and a
backend together behind a REST API, as a JupyterHub service."""
