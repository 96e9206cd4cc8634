"""The Kubernetes backend: attempts as batch/v1 Jobs and model replicas as
Deployments on the nodes the scheduler chose.

``manifests`` (Jobs, gangs, namespaces, Kueue objects), ``serving`` (replica
objects), ``status`` (what the cluster says of nodes and pods), ``labels``
(label values), ``config`` (``c.KubernetesJobs``) and the event part of
``watch`` are pure; ``backend`` holds ``KubernetesBackend``, ``api`` the
thin API layer ``KubeApi``, ``logs`` the pods' log copying, and
``standin`` a stand-in API server for the tests and ``gpuhub bench kube``. Importing the
package imports no Kubernetes client: ``backend`` does that when it connects.
"""
