"""Model serving: deployments of models behind MLServer (Open Inference
Protocol v2) replicas, with revisions, weighted traffic, automatic rollback
and autoscaling. Pure parts here; the service wires them (service/serving/deployments.py,
service/serving/endpoints.py)."""
