"""GPU-aware spawners: notebook servers are admitted by the shared scheduler.

``LocalGPUSpawner`` for the embedded default; ``KubeGPUSpawner`` for
Kubernetes. Both share ``GPUSpawnerMixin`` (the admission path) and
``options`` (the spawn form and the checks of ``user_options``).
"""
