"""The only code that talks to the Kubernetes API server (``KubeApi``, on
``kubernetes_asyncio`` like KubeSpawner): each method is one call, objects
in and out as plain JSON dicts; a watch and a followed log as async
iterators. The backend (``backend``) and its watch loop (``watch``) call it."""
from __future__ import annotations

import asyncio
import os
from typing import AsyncIterator

from .manifests import MANAGED_BY
from .watch import Gone, json_lines

SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
KINDS = ("jobs", "deployments", "pods", "nodes")   # what the backend lists and watches
# kubernetes_asyncio waits for ever by default: an API server that takes a
# request and never answers (a failover that drops connections silently)
# would hold the attempt's create or delete, and a shutdown's settle, for
# good. (connect, silence while reading) in seconds, for every call but the
# watch and the followed log, which are meant to stay open.
CALL_TIMEOUT = (10, 60)


def error_text(e: BaseException) -> str:
    """What a failed call says, never empty: a timeout's own text is."""
    if isinstance(e, asyncio.TimeoutError):
        return (f"the API server did not answer within {CALL_TIMEOUT[1]:g} s "
                f"({CALL_TIMEOUT[0]:g} s to connect)")
    return str(e) or type(e).__name__


class KubeApi:
    """The only code that talks to the API server: each method is one call,
    objects in and out as plain JSON dicts."""

    def __init__(self, api_client, call_timeout: tuple[float, float] = CALL_TIMEOUT):
        from kubernetes_asyncio import client
        self._client = api_client
        self._timeout = call_timeout
        self._batch = client.BatchV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._api_exception = client.exceptions.ApiException
        self._delete_options = client.V1DeleteOptions

    @classmethod
    async def connect(cls) -> "KubeApi":
        """In a pod: the service account; elsewhere: $KUBECONFIG."""
        from kubernetes_asyncio import client, config
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            # Read $KUBECONFIG now: the library reads it once, at import.
            await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        return cls(client.ApiClient())

    async def create(self, manifest: dict, exist_ok: bool = False) -> None:
        ns, kind = manifest["metadata"]["namespace"], manifest["kind"]
        try:
            if kind == "Job":
                await self._batch.create_namespaced_job(
                    ns, manifest, _request_timeout=self._timeout)
            elif kind == "Deployment":
                await self._apps.create_namespaced_deployment(
                    ns, manifest, _request_timeout=self._timeout)
            elif kind == "ConfigMap":
                await self._core.create_namespaced_config_map(
                    ns, manifest, _request_timeout=self._timeout)
            else:
                await self._core.create_namespaced_service(
                    ns, manifest, _request_timeout=self._timeout)
        except self._api_exception as e:
            if not (exist_ok and e.status == 409):
                raise

    async def delete_job(self, name: str, namespace: str, grace_seconds: int) -> None:
        # Background: the Job goes now, its pods get their grace period.
        await self._batch.delete_namespaced_job(name, namespace, body=self._delete_options(
            propagation_policy="Background", grace_period_seconds=grace_seconds),
            _request_timeout=self._timeout)

    async def delete_deployment(self, name: str, namespace: str, grace_seconds: int) -> None:
        await self._apps.delete_namespaced_deployment(name, namespace, body=self._delete_options(
            propagation_policy="Background", grace_period_seconds=grace_seconds),
            _request_timeout=self._timeout)

    async def delete_service(self, name: str, namespace: str) -> None:
        await self._core.delete_namespaced_service(name, namespace,
                                                   _request_timeout=self._timeout)

    async def delete_config_map(self, name: str, namespace: str) -> None:
        await self._core.delete_namespaced_config_map(name, namespace,
                                                      _request_timeout=self._timeout)

    async def _list(self, kind: str, **query):
        """One list (or, with ``watch=True``, watch) request of ``kind``:
        GPU Hub's objects by label, and all the nodes."""
        if kind == "nodes":
            return await self._core.list_node(**query)
        query["label_selector"] = SELECTOR
        if kind == "jobs":
            return await self._batch.list_job_for_all_namespaces(**query)
        if kind == "deployments":
            return await self._apps.list_deployment_for_all_namespaces(**query)
        return await self._core.list_pod_for_all_namespaces(**query)

    async def list_kind(self, kind: str) -> tuple[list[dict], str]:
        """GPU Hub's objects of ``kind`` (all the nodes), and the list's resourceVersion."""
        # The JSON as sent: the client's models would only be turned back
        # into dicts, at a cost that grows with the cluster (1,000 pods).
        response = await self._list(kind, _preload_content=False, _request_timeout=self._timeout)
        async with response:
            if not 200 <= response.status < 300:
                raise self._api_exception(status=response.status, reason=await response.text())
            body = await response.json(content_type=None)
        return body["items"], (body.get("metadata") or {}).get("resourceVersion") or ""

    async def watch(self, kind: str, resource_version: str,
                    timeout_seconds: int = 300) -> AsyncIterator[dict]:
        """The watch events of ``kind`` after ``resource_version``, with
        bookmarks, as JSON dicts, until the server ends the stream (after
        ``timeout_seconds``) or the connection breaks (an exception, as is
        a stream that stays silent 30 s past the timeout). ``Gone`` when the
        server answers 410; ``ApiException`` for any other failure."""
        try:
            response = await self._list(
                kind, watch=True, resource_version=resource_version,
                allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                _preload_content=False, _request_timeout=(10, timeout_seconds + 30))
        except self._api_exception as e:
            if e.status == 410:
                raise Gone(str(e)) from None
            raise
        async with response:
            if response.status == 410:
                raise Gone(await response.text())
            if not 200 <= response.status < 300:
                raise self._api_exception(status=response.status, reason=await response.text())
            async for line in json_lines(response.content.iter_any()):
                yield line

    async def list_jobs(self) -> list[dict]:
        return (await self.list_kind("jobs"))[0]

    async def list_deployments(self) -> list[dict]:
        return (await self.list_kind("deployments"))[0]

    async def list_pods(self) -> list[dict]:
        return (await self.list_kind("pods"))[0]

    async def list_nodes(self) -> list[dict]:
        return (await self.list_kind("nodes"))[0]

    async def pod_log(self, name: str, namespace: str) -> str:
        return await self._core.read_namespaced_pod_log(name, namespace,
                                                        _request_timeout=self._timeout)

    async def follow_log(self, name: str, namespace: str) -> AsyncIterator[bytes]:
        """A running pod's log as it is written, until its container ends."""
        response = await self._core.read_namespaced_pod_log(
            name, namespace, follow=True, _preload_content=False, _request_timeout=(10, None))
        async with response:
            if not 200 <= response.status < 300:
                raise self._api_exception(status=response.status, reason=await response.text())
            async for chunk in response.content.iter_any():
                yield chunk

    async def close(self) -> None:
        await self._client.close()
