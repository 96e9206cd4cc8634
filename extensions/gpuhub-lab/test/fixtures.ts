import { IDeployment, IPool, IRevision, ITeam, IWorkload } from '../src/types';

export function job(over: Partial<IWorkload> = {}): IWorkload {
  return {
    id: 'w1',
    name: 'train',
    kind: 'job',
    team: 'vision',
    user: 'alice',
    state: 'queued',
    reason: '',
    project: '',
    pool: 'a100',
    gpus: 2,
    gpus_total: 2,
    gpus_per_node: 2,
    nodes: 1,
    priority: 'batch',
    time_limit: null,
    grace_period: null,
    command: null,
    notebook: 'train.ipynb',
    parameters: {},
    env: {},
    env_redacted: false,
    working_dir: '/home/alice',
    checkpoint_dir: null,
    attempt: 0,
    exit_code: null,
    cancel_requested: false,
    submitted_at: '2026-11-30T00:00:00Z',
    started_at: null,
    finished_at: null,
    after: [],
    sweep_id: null,
    sweep_index: null,
    schedule_id: null,
    gpu_share: null,
    ...over
  };
}

/** A team's fields the tests do not look at. */
export function teamDefaults(name: string): Omit<ITeam, 'quotas'> {
  return { name, group: `team-${name}`, weight: 1, default: false, notebook_gpu_limits: {} };
}

function device(model: string): IPool['nodes'][number]['devices'][number] {
  return { index: 0, uuid: '', model, memory_mib: 81920, healthy: true, health_reason: '', admin_mark: '' };
}

export const TEAMS: ITeam[] = [
  {
    ...teamDefaults('vision'),
    quotas: {
      a100: { nominal: 8, borrowing_limit: 4, lending_limit: null, used: 6 },
      t4: { nominal: 2, borrowing_limit: 0, lending_limit: null, used: 0 }
    }
  },
  { ...teamDefaults('nlp'), quotas: { a100: { nominal: 4, borrowing_limit: null, lending_limit: null, used: 1 } } }
];

export const POOLS: IPool[] = [
  {
    name: 'a100',
    capacity: 16,
    total: 16,
    used: 7,
    free: 9,
    queued_workloads: 0,
    queued_gpus: 0,
    teams: { vision: 6, nlp: 1 },
    sharing: null,
    nodes: [{ name: 'n1', gpus: 1, drained: false, source: 'declared', devices: [device('A100')] }]
  },
  { name: 't4', capacity: 2, total: 2, used: 0, free: 2, queued_workloads: 0, queued_gpus: 0, teams: {}, sharing: null, nodes: [] }
];

export function revision(over: Partial<IRevision> = {}): IRevision {
  return {
    number: 1,
    model_dir: '/home/alice/models/iris-v1',
    model_path: 'models/iris-v1',
    runtime: 'sklearn',
    predictor: '',
    created_at: '2026-11-30T03:00:00Z',
    created_by: 'alice',
    replicas: ['wa1'],
    ready_replicas: 1,
    in_flight: 0,
    requests: 0,
    rps: 0,
    error_rate: 0,
    p50_ms: null,
    p99_ms: null,
    ...over
  };
}

export function deployment(over: Partial<IDeployment> = {}): IDeployment {
  return {
    team: 'vision',
    name: 'iris',
    user: 'alice',
    pool: 'a100',
    gpus: 0,
    min_replicas: 1,
    max_replicas: 2,
    scale_to_zero_after: null,
    traffic: { '1': 100 },
    stable_revision: 1,
    canary_revision: null,
    rollback: {},
    message: 'revision 1 takes all traffic',
    endpoint: '/services/gpuhub/endpoints/vision/iris/v2/models/iris/infer',
    revisions: [revision()],
    ...over
  };
}

/** A deployment with revision 2 as a 20 % canary of revision 1. */
export function withCanary(): IDeployment {
  return deployment({
    traffic: { '1': 80, '2': 20 },
    canary_revision: 2,
    revisions: [revision(), revision({ number: 2, model_path: 'models/iris-v2', replicas: ['wb1'] })]
  });
}
