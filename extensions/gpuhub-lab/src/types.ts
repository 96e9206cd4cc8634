/**
 * What the server extension (/gpuhub/...) answers: the scheduler service's
 * objects (gpuspawner/service/openapi.yaml), plus the paths the server
 * extension maps into this server's file tree.
 */

export type WorkloadState =
  | 'queued'
  | 'running'
  | 'stopping'
  | 'succeeded'
  | 'failed'
  | 'cancelled'
  | 'stopped';

export interface IAttempt {
  number: number;
  state: string;
  gpus: number;
  borrowed: number;
  started_at: string | null;
  ended_at: string | null;
  exit_code: number | null;
  reason: string;
}

export interface IWorkload {
  id: string;
  name: string;
  kind: string;
  team: string;
  user: string;
  state: WorkloadState;
  reason: string;
  pool: string;
  gpus: number;
  gpus_per_node: number;
  nodes: number;
  priority: string;
  time_limit: number | null;
  command: string[] | null;
  notebook: string | null;
  parameters: Record<string, unknown>;
  env: Record<string, string>;
  working_dir: string;
  checkpoint_dir: string | null;
  attempt: number;
  exit_code: number | null;
  submitted_at: string;
  started_at: string | null;
  finished_at: string | null;
  queue_position?: number;
  attempts?: IAttempt[];
  /** Added by the server extension: paths relative to this server's root. */
  source_path?: string | null;
  output_path?: string | null;
  output_dir_path?: string | null;
  checkpoint_path?: string | null;
  script_args?: string[];
}

export interface IMe {
  name: string;
  teams: string[];
  leads: string[];
  admin: boolean;
  can_submit: boolean;
}

export interface IQuota {
  nominal: number;
  borrowing_limit: number | null;
  lending_limit: number | null;
  used: number;
}

export interface ITeam {
  name: string;
  quotas: Record<string, IQuota>;
}

export interface IPool {
  name: string;
  capacity: number;
  total: number;
  used: number;
  free: number;
  queued_workloads: number;
  queued_gpus: number;
  teams: Record<string, number>;
  nodes: { name: string; devices?: { model: string }[] }[];
}

export interface INotice {
  id: number;
  kind: string;
  message: string;
  created_at: string;
}

export interface IParameter {
  name: string;
  default: string;
  inferred_type_name: string;
  help: string;
}

/** What the submit form sends to POST /gpuhub/workloads. */
export interface ISubmission {
  path: string;
  name?: string;
  team?: string;
  pool?: string;
  gpus: number;
  nodes: number;
  time_limit?: string;
  priority?: string;
  parameters: Record<string, unknown>;
  env: Record<string, string>;
  output_dir?: string;
  checkpoint_dir?: string;
}
