"""The Kubernetes backend: attempts as batch/v1 Jobs and model replicas as
Deployments on the nodes the scheduler chose.

``manifests`` (Jobs, gangs, namespaces, Kueue objects), ``serving`` (replica
objects), ``status`` (what the cluster says of nodes and pods), ``labels``
(label values) and ``config`` (``c.KubernetesJobs``) are pure; ``backend``
holds ``KubernetesBackend`` and the thin API layer ``KubeApi``. Importing the
package imports no Kubernetes client: ``backend`` does that when it connects.
"""
