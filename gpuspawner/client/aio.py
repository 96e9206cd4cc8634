"""The service's REST API for asyncio: ``AsyncApi``, one coroutine per operation.

Generated from gpuspawner/service/api/openapi.yaml by scripts/gen_client.py
(``make client``): do not edit; change the document and run it again."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from .request import Request, query, segment
from .answers import (ApplyPreviewAnswer, EditGpuBody, EditNodeBody, EditPoolBody,
                      GetDeploymentMetricsAnswer, GetHealthAnswer, GetHistoryTraceAnswer,
                      ListAuditAnswer, ListDatasetsAnswer, ListDeploymentsAnswer, ListGpusAnswer,
                      ListNoticesAnswer, ListPoolsAnswer, ListSchedulesAnswer, ListSweepsAnswer,
                      ListTeamsAnswer, ListWorkloadEventsAnswer, ListWorkloadsAnswer,
                      MountServerDatasetsAnswer, PostAuditEntryBody, PostNoticeBody,
                      ReleaseWorkloadBody, ScaleDeploymentBody, SetDeploymentTrafficBody,
                      SetWorkloadPriorityBody)
from .schemas import (AuditEntry, Dataset, DatasetRequest, Deploy, Deployment, JobSpec, Me, Notice,
                      Preview, PreviewRequest, Schedule, ScheduleEdit, ScheduleRequest,
                      ServerRequest, Sweep, SweepRequest, Team, TeamChange, Usage, Workload)


class AsyncApi:
    """Every operation of the service. A subclass gives ``_send``: it sends ``request`` and
    returns the parsed JSON answer (text for text, None for no content), or raises
    ``ApiError``."""

    async def _send(self, request: Request) -> Any:
        raise NotImplementedError

    async def get_me(self) -> Me:
        """GET /me: Who the caller is, their teams and what they may do"""
        return await self._send(Request("GET", "/me"))

    async def list_workloads(self, *, state: Optional[Sequence[str]] = None,
                             team: Optional[str] = None, user: Optional[str] = None,
                             kind: Optional[str] = None, pool: Optional[str] = None,
                             project: Optional[str] = None,
                             sweep_id: Optional[Sequence[str]] = None,
                             schedule_id: Optional[Sequence[str]] = None,
                             limit: Optional[int] = None, detail: Optional[int] = None,
                             cursor: Optional[str] = None) -> ListWorkloadsAnswer:
        """GET /workloads: List workloads of the caller's teams (all for admins), newest first"""
        params = query(("state", state), ("team", team), ("user", user), ("kind", kind),
                       ("pool", pool), ("project", project), ("sweep_id", sweep_id),
                       ("schedule_id", schedule_id), ("limit", limit), ("detail", detail),
                       ("cursor", cursor))
        return await self._send(Request("GET", "/workloads", params))

    async def submit_workload(self, body: Union[JobSpec, ServerRequest]) -> Workload:
        """POST /workloads: Submit a job (users), or ask for a notebook server's GPUs (the hub's
        spawner)"""
        return await self._send(Request("POST", "/workloads", (), body))

    async def get_workload(self, id: str, *, wait_while: Optional[str] = None,
                           timeout: Optional[int] = None) -> Workload:
        """GET /workloads/{id}: One workload with its attempts"""
        params = query(("wait_while", wait_while), ("timeout", timeout))
        return await self._send(Request("GET", f"/workloads/{segment(id)}", params))

    async def cancel_workload(self, id: str) -> Workload:
        """DELETE /workloads/{id}: Cancel a workload (queued ones at once; running ones get
        SIGTERM, then SIGKILL after the grace period)"""
        return await self._send(Request("DELETE", f"/workloads/{segment(id)}"))

    async def cancel_workload_by_post(self, id: str) -> Workload:
        """POST /workloads/{id}/cancel: Same as DELETE /workloads/{id}, for clients that cannot
        send DELETE"""
        return await self._send(Request("POST", f"/workloads/{segment(id)}/cancel"))

    async def release_workload(self, id: str,
                               body: Optional[ReleaseWorkloadBody] = None) -> Workload:
        """POST /workloads/{id}/release: The hub's spawner reports a notebook server stopped:
        its GPUs go back (idempotent; admin scope)"""
        return await self._send(Request("POST", f"/workloads/{segment(id)}/release", (), body))

    async def list_workload_events(self, id: str) -> ListWorkloadEventsAnswer:
        """GET /workloads/{id}/events: Every state change of the workload, oldest first"""
        return await self._send(Request("GET", f"/workloads/{segment(id)}/events"))

    async def hold_workload(self, id: str) -> Workload:
        """POST /workloads/{id}/hold: Hold a queued job (it keeps its submit time but is not
        considered until released; owner, team lead or admin)"""
        return await self._send(Request("POST", f"/workloads/{segment(id)}/hold"))

    async def unhold_workload(self, id: str) -> Workload:
        """POST /workloads/{id}/unhold: Release a held job back into the queue at its old place"""
        return await self._send(Request("POST", f"/workloads/{segment(id)}/unhold"))

    async def set_workload_priority(self, id: str, body: SetWorkloadPriorityBody) -> Workload:
        """PUT /workloads/{id}/priority: Change the priority class of a queued or held workload
        (team lead or admin; audited)"""
        return await self._send(Request("PUT", f"/workloads/{segment(id)}/priority", (), body))

    async def get_workload_logs(self, id: str, *, attempt: Optional[int] = None,
                                follow: Optional[bool] = None) -> str:
        """GET /workloads/{id}/logs: Output (stdout and stderr) of an attempt"""
        params = query(("attempt", attempt), ("follow", follow))
        return await self._send(Request("GET", f"/workloads/{segment(id)}/logs", params))

    async def list_sweeps(self, *, team: Optional[Sequence[str]] = None,
                          state: Optional[Sequence[str]] = None,
                          limit: Optional[int] = None) -> ListSweepsAnswer:
        """GET /sweeps: Sweeps of the caller's teams (all for admins), newest first, without
        their tasks"""
        params = query(("team", team), ("state", state), ("limit", limit))
        return await self._send(Request("GET", "/sweeps", params))

    async def submit_sweep(self, body: SweepRequest) -> Sweep:
        """POST /sweeps: Submit one job over a parameter grid or list, as one workload per task"""
        return await self._send(Request("POST", "/sweeps", (), body))

    async def get_sweep(self, id: str) -> Sweep:
        """GET /sweeps/{id}: One sweep with its tasks, their metric and the best one"""
        return await self._send(Request("GET", f"/sweeps/{segment(id)}"))

    async def cancel_sweep(self, id: str) -> Sweep:
        """POST /sweeps/{id}/cancel: Cancel every task of the sweep that has not ended (running
        ones are stopped)"""
        return await self._send(Request("POST", f"/sweeps/{segment(id)}/cancel"))

    async def retry_sweep(self, id: str) -> Sweep:
        """POST /sweeps/{id}/retry: Run each failed or cancelled task again, as a new workload
        with the same index and parameters"""
        return await self._send(Request("POST", f"/sweeps/{segment(id)}/retry"))

    async def list_pools(self) -> ListPoolsAnswer:
        """GET /pools: GPU pools with capacity, free GPUs, queue and per-team use"""
        return await self._send(Request("GET", "/pools"))

    async def edit_pool(self, name: str, body: EditPoolBody) -> dict[str, Any]:
        """PATCH /pools/{name}: Set a pool's price per GPU-hour (admins; audited)"""
        return await self._send(Request("PATCH", f"/pools/{segment(name)}", (), body))

    async def edit_node(self, name: str, body: EditNodeBody) -> dict[str, Any]:
        """PATCH /nodes/{name}: Drain a node (no new work; running work runs to its end) or
        undrain it (admins; audited)"""
        return await self._send(Request("PATCH", f"/nodes/{segment(name)}", (), body))

    async def edit_gpu(self, name: str, index: int, body: EditGpuBody) -> dict[str, Any]:
        """PATCH /nodes/{name}/gpus/{index}: Take a GPU out of service (work on it is requeued;
        a reason is required) or put it back (admins; audited)"""
        path = f"/nodes/{segment(name)}/gpus/{segment(index)}"
        return await self._send(Request("PATCH", path, (), body))

    async def list_deployments(self) -> ListDeploymentsAnswer:
        """GET /deployments: Deployments of the caller's teams (all for admins) with revisions,
        traffic, replicas and live numbers"""
        return await self._send(Request("GET", "/deployments"))

    async def deploy(self, body: Deploy) -> Deployment:
        """POST /deployments: Deploy a model directory (a new deployment, or a new revision of
        one; canary_percent sends only part of the traffic to it)"""
        return await self._send(Request("POST", "/deployments", (), body))

    async def get_deployment(self, team: str, name: str) -> Deployment:
        """GET /deployments/{team}/{name}: One deployment"""
        return await self._send(Request("GET", f"/deployments/{segment(team)}/{segment(name)}"))

    async def delete_deployment(self, team: str, name: str) -> dict[str, Any]:
        """DELETE /deployments/{team}/{name}: Delete a deployment (its replicas stop)"""
        return await self._send(Request("DELETE", f"/deployments/{segment(team)}/{segment(name)}"))

    async def get_deployment_metrics(self, team: str, name: str, *,
                                     seconds: Optional[int] = None) -> GetDeploymentMetricsAnswer:
        """GET /deployments/{team}/{name}/metrics: The live charts' data: per revision, one
        point per 5 s bucket (oldest first, empty buckets included) with requests, rps,
        error_rate, p50_ms, p99_ms, ready_replicas, in_flight"""
        params = query(("seconds", seconds))
        path = f"/deployments/{segment(team)}/{segment(name)}/metrics"
        return await self._send(Request("GET", path, params))

    async def promote_deployment(self, team: str, name: str) -> Deployment:
        """POST /deployments/{team}/{name}/promote: The canary revision takes all traffic
        (audited)"""
        path = f"/deployments/{segment(team)}/{segment(name)}/promote"
        return await self._send(Request("POST", path))

    async def rollback_deployment(self, team: str, name: str) -> Deployment:
        """POST /deployments/{team}/{name}/rollback: All traffic back to the stable (or the
        previous) revision (audited)"""
        path = f"/deployments/{segment(team)}/{segment(name)}/rollback"
        return await self._send(Request("POST", path))

    async def set_deployment_traffic(self, team: str, name: str,
                                     body: SetDeploymentTrafficBody) -> Deployment:
        """POST /deployments/{team}/{name}/traffic: Split the traffic between revisions (whole
        percents adding up to 100; audited)"""
        path = f"/deployments/{segment(team)}/{segment(name)}/traffic"
        return await self._send(Request("POST", path, (), body))

    async def scale_deployment(self, team: str, name: str,
                               body: ScaleDeploymentBody) -> Deployment:
        """POST /deployments/{team}/{name}/scale: New replica bounds, and for a CPU deployment
        the idle seconds before it scales to zero (audited)"""
        path = f"/deployments/{segment(team)}/{segment(name)}/scale"
        return await self._send(Request("POST", path, (), body))

    async def cancel_revision(self, team: str, name: str, revision: int) -> Deployment:
        """POST /deployments/{team}/{name}/revisions/{revision}/cancel: Cancel a waiting
        revision (its owner, a lead of its team, an admin; audited); it never rolls out and
        the deployment serves on as it did"""
        path = f"/deployments/{segment(team)}/{segment(name)}/revisions/{segment(revision)}/cancel"
        return await self._send(Request("POST", path))

    async def list_teams(self) -> ListTeamsAnswer:
        """GET /teams: Teams the caller belongs to (all for admins) with quotas and use"""
        return await self._send(Request("GET", "/teams"))

    async def get_team(self, name: str) -> Team:
        """GET /teams/{name}: One team"""
        return await self._send(Request("GET", f"/teams/{segment(name)}"))

    async def set_team(self, name: str, body: TeamChange) -> Team:
        """PUT /teams/{name}: Create a team or change its weight, quotas and storage quota
        (admins only; audited)"""
        return await self._send(Request("PUT", f"/teams/{segment(name)}", (), body))

    async def edit_team(self, name: str, body: TeamChange) -> Team:
        """PATCH /teams/{name}: Same as PUT (fields left out are kept)"""
        return await self._send(Request("PATCH", f"/teams/{segment(name)}", (), body))

    async def get_usage(self, *, from_: Optional[str] = None, to: Optional[str] = None,
                        group_by: Optional[str] = None, series_by: Optional[str] = None,
                        format: Optional[str] = None) -> Usage:
        """GET /usage: GPU-hours and cost in a time window (finished attempts plus running ones
        up to now)"""
        params = query(("from", from_), ("to", to), ("group_by", group_by),
                       ("series_by", series_by), ("format", format))
        return await self._send(Request("GET", "/usage", params))

    async def list_gpus(self) -> ListGpusAnswer:
        """GET /gpus: Every GPU of the service's nodes: utilization now and the workload holding
        it (admins; the culler uses it)"""
        return await self._send(Request("GET", "/gpus"))

    async def list_notices(self, *, user: Optional[str] = None) -> ListNoticesAnswer:
        """GET /notices: Active notices (such as the culler's warnings): your own, or anyone's
        for admins (?user=)"""
        return await self._send(Request("GET", "/notices", query(("user", user))))

    async def post_notice(self, body: PostNoticeBody) -> Notice:
        """POST /notices: Post a notice for a user's server (admins; audited)"""
        return await self._send(Request("POST", "/notices", (), body))

    async def delete_notice(self, nid: int) -> Notice:
        """DELETE /notices/{nid}: Clear a notice (admins)"""
        return await self._send(Request("DELETE", f"/notices/{segment(nid)}"))

    async def list_audit(self, *, limit: Optional[int] = None, action: Optional[str] = None,
                         actor: Optional[str] = None,
                         target: Optional[str] = None) -> ListAuditAnswer:
        """GET /audit: The append-only audit log, newest first (admins)"""
        params = query(("limit", limit), ("action", action), ("actor", actor), ("target", target))
        return await self._send(Request("GET", "/audit", params))

    async def post_audit_entry(self, body: PostAuditEntryBody) -> AuditEntry:
        """POST /audit: Append an entry (admins; e.g. the culler recording a cull with its
        numbers)"""
        return await self._send(Request("POST", "/audit", (), body))

    async def get_history_trace(self, *, since: str, pseudonymise: Optional[str] = None,
                                format: Optional[str] = None) -> GetHistoryTraceAnswer:
        """GET /history/trace: The cluster's own submissions of a period as a simulator trace
        (admins): jobs, notebook sessions and deployment replicas with their real run times"""
        params = query(("since", since), ("pseudonymise", pseudonymise), ("format", format))
        return await self._send(Request("GET", "/history/trace", params))

    async def start_preview(self, body: PreviewRequest) -> Preview:
        """POST /whatif: Start a what-if preview: the period's history replayed under the
        current settings and with the proposed ones (admins; a team lead for their own team's
        settings)"""
        return await self._send(Request("POST", "/whatif", (), body))

    async def get_preview(self, id: str) -> Preview:
        """GET /whatif/{id}: A preview, its progress and, once done, its figures (its creator
        and admins; a lead sees their teams' figures)"""
        return await self._send(Request("GET", f"/whatif/{segment(id)}"))

    async def cancel_preview(self, id: str) -> Preview:
        """POST /whatif/{id}/cancel: Cancel a running preview (its worker process is killed)"""
        return await self._send(Request("POST", f"/whatif/{segment(id)}/cancel"))

    async def apply_preview(self, id: str) -> ApplyPreviewAnswer:
        """POST /whatif/{id}/apply: Save a finished preview's team settings through PUT
        /teams/{name}'s path (admins; audited as set-team with the preview's figures)"""
        return await self._send(Request("POST", f"/whatif/{segment(id)}/apply"))

    async def list_schedules(self, *, team: Optional[str] = None) -> ListSchedulesAnswer:
        """GET /schedules: Schedules of the caller's teams and their own (all for admins),
        newest first"""
        return await self._send(Request("GET", "/schedules", query(("team", team))))

    async def create_schedule(self, body: ScheduleRequest) -> Schedule:
        """POST /schedules: Create a schedule: its spec is submitted as a normal workload of its
        team at each firing of cron in timezone"""
        return await self._send(Request("POST", "/schedules", (), body))

    async def get_schedule(self, id: str) -> Schedule:
        """GET /schedules/{id}: A schedule, its next firing and its last ten"""
        return await self._send(Request("GET", f"/schedules/{segment(id)}"))

    async def delete_schedule(self, id: str) -> None:
        """DELETE /schedules/{id}: Delete a schedule; the workloads it made stay"""
        return await self._send(Request("DELETE", f"/schedules/{segment(id)}"))

    async def edit_schedule(self, id: str, body: ScheduleEdit) -> Schedule:
        """PATCH /schedules/{id}: Change a schedule (its user, a lead of its team, or an admin);
        a new cron or timezone sets the next firing anew"""
        return await self._send(Request("PATCH", f"/schedules/{segment(id)}", (), body))

    async def pause_schedule(self, id: str) -> Schedule:
        """POST /schedules/{id}/pause: Pause a schedule (nothing fires until it is resumed)"""
        return await self._send(Request("POST", f"/schedules/{segment(id)}/pause"))

    async def resume_schedule(self, id: str) -> Schedule:
        """POST /schedules/{id}/resume: Resume a schedule; firings while it was paused are not
        run, the next one after now is"""
        return await self._send(Request("POST", f"/schedules/{segment(id)}/resume"))

    async def run_schedule(self, id: str) -> Workload:
        """POST /schedules/{id}/run: Fire a schedule now (paused or not), without changing its
        next firing"""
        return await self._send(Request("POST", f"/schedules/{segment(id)}/run"))

    async def list_datasets(self) -> ListDatasetsAnswer:
        """GET /datasets: The datasets the caller may read (their teams' own and those shared
        with them; all for admins), by name"""
        return await self._send(Request("GET", "/datasets"))

    async def create_dataset(self, body: DatasetRequest) -> Dataset:
        """POST /datasets: Register a folder as a named dataset of a team (a lead of the team,
        or an admin)"""
        return await self._send(Request("POST", "/datasets", (), body))

    async def get_dataset(self, name: str) -> Dataset:
        """GET /datasets/{name}: A dataset the caller may read (404 for one they may not)"""
        return await self._send(Request("GET", f"/datasets/{segment(name)}"))

    async def delete_dataset(self, name: str) -> None:
        """DELETE /datasets/{name}: Unregister a dataset (a lead of its team, or an admin): its
        files stay; a queued workload that asks for it no longer starts"""
        return await self._send(Request("DELETE", f"/datasets/{segment(name)}"))

    async def share_dataset(self, name: str, team: str) -> Dataset:
        """PUT /datasets/{name}/shares/{team}: Let another team's workloads read the dataset
        (read-only; a lead of its team, or an admin)"""
        path = f"/datasets/{segment(name)}/shares/{segment(team)}"
        return await self._send(Request("PUT", path))

    async def unshare_dataset(self, name: str, team: str) -> None:
        """DELETE /datasets/{name}/shares/{team}: Take a team's read access away: its workloads
        that have not started no longer start"""
        path = f"/datasets/{segment(name)}/shares/{segment(team)}"
        return await self._send(Request("DELETE", path))

    async def mount_server_datasets(self, id: str) -> MountServerDatasetsAnswer:
        """POST /workloads/{id}/datasets: The hub's spawner starts a notebook server that asked
        for datasets: their folders, checked again and the use audited (admin scope)"""
        return await self._send(Request("POST", f"/workloads/{segment(id)}/datasets"))

    async def get_openapi(self) -> dict[str, Any]:
        """GET /openapi.json: This document"""
        return await self._send(Request("GET", "/openapi.json"))

    async def get_health(self) -> GetHealthAnswer:
        """GET /health: Liveness (the database answers), how GPUs and limits are enforced, and
        whether users are isolated"""
        return await self._send(Request("GET", "/health"))
