"""Benchmarks behind `gpuhub bench …`: api (the hub's REST API), admission, kube (the stand-in
Kubernetes API), sweeps."""
