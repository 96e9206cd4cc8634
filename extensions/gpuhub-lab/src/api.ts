/**
 * The typed client of the server extension's REST API (/gpuhub/...). Every
 * failure is an ApiError carrying the service's own message and field.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  IDataset,
  IDeployment,
  IDeploymentMetrics,
  IDeployRequest,
  IMe,
  INotice,
  IParameter,
  IPool,
  ISchedule,
  IScheduleSubmission,
  ISubmission,
  ISweep,
  ISweepSubmission,
  ITeam,
  IWorkload
} from './types';
import { ApiError, errorFrom, xsrfToken } from './errors';
import type { ISchedulePatch } from './scheduleedit';

export { ApiError };

export type JobScope = 'mine' | 'team';

/** A page of the Jobs panel: the jobs, newest first, and whether older ones exist. */
export interface IJobsPage {
  workloads: IWorkload[];
  more: boolean;
}

export class GpuHubApi {
  constructor(
    private readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /** Absolute URL of an endpoint (for EventSource and downloads). */
  url(path: string, query: Record<string, string> = {}): string {
    const q = URLExt.objectToQueryString(query);
    return URLExt.join(this.settings.baseUrl, 'gpuhub', path) + q;
  }

  me(): Promise<IMe> {
    return this.request('me');
  }

  async teams(): Promise<ITeam[]> {
    return (await this.request<{ teams: ITeam[] }>('teams')).teams;
  }

  async pools(): Promise<IPool[]> {
    return (await this.request<{ pools: IPool[] }>('pools')).pools;
  }

  /** The datasets the user's teams may read (the submit dialog's choices). */
  async datasets(): Promise<IDataset[]> {
    return (await this.request<{ datasets: IDataset[] }>('datasets')).datasets;
  }

  async notices(): Promise<INotice[]> {
    return (await this.request<{ notices: INotice[] }>('notices')).notices;
  }

  /** The newest ``limit`` jobs of the scope, and whether there are more. */
  async jobs(scope: JobScope, limit: number): Promise<IJobsPage> {
    const r = await this.request<{ workloads: IWorkload[]; next_cursor?: string | null }>('workloads', {
      query: { scope, limit: String(limit) }
    });
    return { workloads: r.workloads, more: Boolean(r.next_cursor) };
  }

  job(id: string): Promise<IWorkload> {
    return this.request(`workloads/${encodeURIComponent(id)}`);
  }

  submit(submission: ISubmission): Promise<IWorkload> {
    return this.request('workloads', {
      method: 'POST',
      body: JSON.stringify(submission)
    });
  }

  cancel(id: string): Promise<IWorkload> {
    return this.request(`workloads/${encodeURIComponent(id)}`, { method: 'DELETE' });
  }

  logs(id: string, attempt?: number): Promise<string> {
    const query: Record<string, string> = {};
    if (attempt !== undefined) {
      query.attempt = String(attempt);
    }
    return this.request(`workloads/${encodeURIComponent(id)}/logs`, { query, text: true });
  }

  /**
   * The URL of a log's event stream. EventSource cannot send headers, and
   * JupyterHub refuses cookie-authenticated API requests without an XSRF
   * token: it goes in the query, as tornado reads it.
   */
  logStreamUrl(id: string, attempt: number): string {
    const query: Record<string, string> = { attempt: String(attempt), follow: 'true' };
    const xsrf = xsrfToken(typeof document === 'undefined' ? '' : document.cookie);
    if (xsrf) {
      query._xsrf = xsrf;
    }
    return this.url(`workloads/${encodeURIComponent(id)}/logs`, query);
  }

  outputsUrl(id: string): string {
    return this.url(`workloads/${encodeURIComponent(id)}/outputs`);
  }

  async parameters(path: string): Promise<IParameter[]> {
    const r = await this.request<{ parameters: IParameter[] }>('parameters', {
      query: { path }
    });
    return r.parameters;
  }

  async sweeps(scope: JobScope): Promise<ISweep[]> {
    return (await this.request<{ sweeps: ISweep[] }>('sweeps', { query: { scope } })).sweeps;
  }

  /** A sweep with its tasks (parameters, state, metric, output notebook). */
  sweep(id: string): Promise<ISweep> {
    return this.request(`sweeps/${encodeURIComponent(id)}`);
  }

  submitSweep(submission: ISweepSubmission): Promise<ISweep> {
    return this.request('sweeps', { method: 'POST', body: JSON.stringify(submission) });
  }

  /** cancel (every task not ended) or retry (the failed and cancelled ones). */
  sweepAction(id: string, action: 'cancel' | 'retry'): Promise<ISweep> {
    return this.request(`sweeps/${encodeURIComponent(id)}/${action}`, { method: 'POST', body: '{}' });
  }

  async schedules(scope: JobScope): Promise<ISchedule[]> {
    return (await this.request<{ schedules: ISchedule[] }>('schedules', { query: { scope } })).schedules;
  }

  createSchedule(submission: IScheduleSubmission): Promise<ISchedule> {
    return this.request('schedules', { method: 'POST', body: JSON.stringify(submission) });
  }

  /** pause, resume (the schedule) or run (now: the job it made). */
  scheduleAction(id: string, action: 'pause' | 'resume' | 'run'): Promise<ISchedule | IWorkload> {
    return this.request(`schedules/${encodeURIComponent(id)}/${action}`, { method: 'POST', body: '{}' });
  }

  /** Change a schedule's name, cron expression, time zone or catch-up (PATCH: only what is sent). */
  updateSchedule(id: string, patch: ISchedulePatch): Promise<ISchedule> {
    return this.request(`schedules/${encodeURIComponent(id)}`, { method: 'PATCH', body: JSON.stringify(patch) });
  }

  deleteSchedule(id: string): Promise<unknown> {
    return this.request(`schedules/${encodeURIComponent(id)}`, { method: 'DELETE', text: true });
  }

  async deployments(): Promise<IDeployment[]> {
    return (await this.request<{ deployments: IDeployment[] }>('deployments')).deployments;
  }

  deploy(request: IDeployRequest): Promise<IDeployment> {
    return this.request('deployments', { method: 'POST', body: JSON.stringify(request) });
  }

  metrics(d: IDeployment): Promise<IDeploymentMetrics> {
    return this.request(`${deploymentPath(d)}/metrics`);
  }

  /** promote, rollback, traffic ({traffic}) or scale ({min_replicas, max_replicas}). */
  deploymentAction(d: IDeployment, action: string, body: object = {}): Promise<IDeployment> {
    return this.request(`${deploymentPath(d)}/${encodeURIComponent(action)}`, {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  /** Cancel a waiting revision (the deployment serves on as it does). */
  cancelRevision(d: IDeployment, revision: number): Promise<IDeployment> {
    return this.request(`${deploymentPath(d)}/revisions/${revision}/cancel`, { method: 'POST', body: '{}' });
  }

  deleteDeployment(d: IDeployment): Promise<unknown> {
    return this.request(deploymentPath(d), { method: 'DELETE' });
  }

  private async request<T>(
    path: string,
    options: {
      method?: string;
      body?: string;
      query?: Record<string, string>;
      text?: boolean;
    } = {}
  ): Promise<T> {
    const url = this.url(path, options.query);
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        url,
        { method: options.method ?? 'GET', body: options.body },
        this.settings
      );
    } catch (error) {
      throw new ApiError(0, `cannot reach this Jupyter server: ${error}`);
    }
    const text = await response.text();
    if (!response.ok) {
      throw errorFrom(response.status, text);
    }
    return (options.text ? text : JSON.parse(text)) as T;
  }
}

function deploymentPath(d: Pick<IDeployment, 'team' | 'name'>): string {
  return `deployments/${encodeURIComponent(d.team)}/${encodeURIComponent(d.name)}`;
}
