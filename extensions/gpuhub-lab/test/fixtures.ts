import { IPool, ITeam, IWorkload } from '../src/types';

export function job(over: Partial<IWorkload> = {}): IWorkload {
  return {
    id: 'w1',
    name: 'train',
    kind: 'job',
    team: 'vision',
    user: 'alice',
    state: 'queued',
    reason: '',
    pool: 'a100',
    gpus: 2,
    gpus_per_node: 2,
    nodes: 1,
    priority: 'batch',
    time_limit: null,
    command: null,
    notebook: 'train.ipynb',
    parameters: {},
    env: {},
    working_dir: '/home/alice',
    checkpoint_dir: null,
    attempt: 0,
    exit_code: null,
    submitted_at: '2026-11-30T00:00:00Z',
    started_at: null,
    finished_at: null,
    ...over
  };
}

export const TEAMS: ITeam[] = [
  {
    name: 'vision',
    quotas: {
      a100: { nominal: 8, borrowing_limit: 4, lending_limit: null, used: 6 },
      t4: { nominal: 2, borrowing_limit: 0, lending_limit: null, used: 0 }
    }
  },
  { name: 'nlp', quotas: { a100: { nominal: 4, borrowing_limit: null, lending_limit: null, used: 1 } } }
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
    nodes: [{ name: 'n1', devices: [{ model: 'A100' }] }]
  },
  { name: 't4', capacity: 2, total: 2, used: 0, free: 2, queued_workloads: 0, queued_gpus: 0, teams: {}, nodes: [] }
];
