/**
 * What the server extension (/gpuhub/...) answers: the scheduler service's
 * objects (gpuspawner/service/api/openapi.yaml), plus the paths the server
 * extension maps into this server's file tree.
 */

import type { components } from './service.generated';

/**
 * The scheduler service's objects are generated from its OpenAPI document
 * (\`jlpm gen:types\` writes src/service.generated.ts; a test checks it is up
 * to date), so the front end cannot drift from the service.
 */
type Schemas = components['schemas'];

export type WorkloadState = Schemas['Workload']['state'];
export type IAttempt = Schemas['Attempt'];
/** An attempt as the Jobs panel lists it: the service's, or the one waiting to be admitted. */
export type IAttemptRow = Omit<IAttempt, 'state' | 'started_at'> & {
  state: IAttempt['state'] | 'queued' | 'held';
  started_at: string | null;
};
export type IExpectedStart = NonNullable<Schemas['ExpectedStart']>;
export type IMe = Schemas['Me'];
export type IQuota = Schemas['Quota'];
export type ITeam = Schemas['Team'];
export type IPool = Schemas['Pool'];
export type INotice = Schemas['Notice'];
/** A dataset the user's teams may read (GET /datasets): a job asks for it by name. */
export type IDataset = Schemas['Dataset'];

export type IWorkload = Schemas['Workload'] & {
  /** Added by the server extension: paths relative to this server's root. */
  source_path?: string | null;
  output_path?: string | null;
  output_dir_path?: string | null;
  checkpoint_path?: string | null;
  working_dir_path?: string | null;
  script_args?: string[];
  /** Where a succeeded job wrote a model the deploy dialog can serve (else null). */
  model_path?: string | null;
}

export interface IParameter {
  name: string;
  default: string;
  inferred_type_name: string;
  help: string;
  /** The default's type when it is a literal: int, float, str, bool, list, dict, none; else expr. */
  type?: string;
}

/** What the service waits for before a workload runs: a job's or a sweep's end. */
export type IDependency = Schemas['Dependency'];
export type ISweepCounts = Schemas['SweepCounts'];
export type ISweepTask = Schemas['SweepTask'] & {
  /** Added by the server extension: the output notebook relative to this server's root. */
  output_path?: string | null;
};
/** A sweep; with its tasks from GET /sweeps/{id}. */
export type ISweep = Omit<Schemas['Sweep'], 'tasks'> & { tasks?: ISweepTask[] };

export type ISchedule = Schemas['Schedule'] & {
  /** Added by the server extension: the file it runs, relative to this server's root. */
  source_path?: string | null;
};

/** What the Sweep tab sends to POST /gpuhub/sweeps: the job's form and the grid. */
export interface ISweepSubmission extends ISubmission {
  grid: Record<string, unknown[]>;
  max_running?: number;
  metric?: { name: string; goal: 'max' | 'min' };
  after?: IDependency[];
}

/** What the Schedule tab sends to POST /gpuhub/schedules. */
export interface IScheduleSubmission extends ISubmission {
  schedule_name?: string;
  cron: string;
  timezone: string;
  paused?: boolean;
}

/** What the submit form sends to POST /gpuhub/workloads. */
export interface ISubmission {
  path: string;
  name?: string;
  team?: string;
  pool?: string;
  gpus_per_node: number;
  nodes: number;
  /** Part of one GPU ("1/4") in a pool that shares its GPUs; gpus_per_node is then 1. */
  gpu_share?: string;
  time_limit?: string;
  priority?: string;
  parameters: Record<string, unknown>;
  env: Record<string, string>;
  output_dir?: string;
  checkpoint_dir?: string;
  after?: IDependency[];
  /** Datasets the job reads, each read-only at /datasets/NAME. */
  datasets?: string[];
}

export type RevisionState = 'ready' | 'waiting' | 'failed' | 'cancelled';

/** One revision of a deployment: its model and what the router measured (last minute). */
export interface IRevision {
  number: number;
  model_dir: string;
  /** Added by the server extension: model_dir relative to this server's root. */
  model_path: string | null;
  runtime: string;
  predictor: string;
  created_at: string;
  created_by: string;
  /** ready: deployed (it may take traffic); waiting for its `after`; failed: never deployed; cancelled before its rollout. */
  state?: RevisionState;
  /** What a waiting revision waits for ("waiting for w1a2b3c4d5e6 (ok)"), or why it failed or was cancelled. */
  reason?: string;
  /** What a waiting revision waits for. */
  after?: IDependency[];
  replicas: string[];
  ready_replicas: number;
  in_flight: number;
  requests: number;
  rps: number;
  error_rate: number;
  p50_ms: number | null;
  p99_ms: number | null;
}

export interface IRollbackRule {
  error_rate?: number;
  p99_ms?: number;
  min_requests?: number;
}

export interface IDeployment {
  team: string;
  name: string;
  user: string;
  pool: string;
  gpus: number;
  min_replicas: number;
  max_replicas: number;
  /** Seconds without a request before a CPU deployment with min_replicas 0 goes to none. */
  scale_to_zero_after: number | null;
  /** Revision number → percent of the requests. */
  traffic: Record<string, number>;
  stable_revision: number;
  canary_revision: number | null;
  rollback: IRollbackRule;
  message: string;
  /** The inference path under the hub (…/v2/models/{name}/infer). */
  endpoint: string;
  revisions: IRevision[];
}

/** One 5 s bucket of a revision's requests (empty buckets: 0 requests, null latencies). */
export interface IMetricPoint {
  t: string;
  requests: number;
  rps: number;
  error_rate: number | null;
  p50_ms: number | null;
  p99_ms: number | null;
  /** The most seen in the bucket; null before the first sample. */
  ready_replicas: number | null;
  in_flight: number | null;
}

export interface IDeploymentMetrics {
  interval: number;
  /** Revision number → points, oldest first. */
  revisions: Record<string, IMetricPoint[]>;
}

/** What the deploy dialog sends to POST /gpuhub/deployments. */
export interface IDeployRequest {
  name: string;
  team?: string;
  model_dir: string;
  runtime: string;
  predictor?: string;
  pool?: string;
  gpus: number;
  min_replicas: number;
  max_replicas: number;
  scale_to_zero_after?: number;
  canary_percent?: number;
  rollback?: IRollbackRule;
}
