"""Deployments: revisions and traffic in the database, the controller that keeps replicas, the
REST API and the router in front of replicas."""
