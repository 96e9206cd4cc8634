/**
 * The submit form's values and how they become a submission. Pure: the
 * form component keeps text; this module parses it.
 */
import type { CronKind } from './cron';
import { shareFraction } from './format';
import { quotaView, requestFit } from './quota';
import { IDataset, IDependency, IPool, ISubmission, ITeam, IWorkload } from './types';

export const SUBMITTABLE = ['.ipynb', '.py', '.sh'];

export function isSubmittable(path: string | null | undefined): boolean {
  return !!path && SUBMITTABLE.some(ext => path.toLowerCase().endsWith(ext));
}

export interface IFormValues {
  path: string;
  name: string;
  team: string;
  pool: string;
  gpus: string;
  /** "" for whole GPUs, else a share of one GPU ("1/4") in a pool that shares its GPUs. */
  gpuShare: string;
  nodes: string;
  timeLimit: string;
  priority: string;
  /** "name = value" lines. */
  parameters: string;
  /** "NAME=value" lines. */
  env: string;
  outputDir: string;
  checkpointDir: string;
  /** Names of the datasets the job reads (read-only at /datasets/NAME). */
  datasets: string[];
  /** "Run after": a job or sweep id ("" for none) and the condition. */
  afterId: string;
  afterCondition: string;
  /** Which tab of the dialog: one job, a sweep over a grid, a schedule. */
  mode: FormMode;
  /** Sweep tab: per parameter, its values ("0.1, 0.01"); a script's as "name = v1, v2" lines. */
  sweepValues: Record<string, string>;
  sweepLines: string;
  maxRunning: string;
  metricName: string;
  metricGoal: 'max' | 'min';
  /** Schedule tab. */
  scheduleName: string;
  cronKind: CronKind;
  cronTime: string;
  cronMinute: string;
  cronWeekday: string;
  cronCustom: string;
  timezone: string;
}

export type FormMode = 'job' | 'sweep' | 'schedule';

/** What the next form remembers of a submission (not the file nor its parameters). */
export type RememberedValues = Pick<
  IFormValues,
  'team' | 'pool' | 'gpus' | 'gpuShare' | 'nodes' | 'timeLimit' | 'priority' | 'env' | 'outputDir' | 'checkpointDir'
>;

export const EMPTY_FORM: IFormValues = {
  path: '',
  name: '',
  team: '',
  pool: '',
  gpus: '1',
  gpuShare: '',
  nodes: '1',
  timeLimit: '',
  priority: 'batch',
  parameters: '',
  env: '',
  outputDir: '',
  checkpointDir: '',
  datasets: [],
  afterId: '',
  afterCondition: 'ok',
  mode: 'job',
  sweepValues: {},
  sweepLines: '',
  maxRunning: '',
  metricName: '',
  metricGoal: 'max',
  scheduleName: '',
  cronKind: 'daily',
  cronTime: '09:00',
  cronMinute: '0',
  cronWeekday: '1',
  cronCustom: '',
  timezone: 'UTC'
};

export function remembered(values: IFormValues): RememberedValues {
  const { team, pool, gpus, gpuShare, nodes, timeLimit, priority, env, outputDir, checkpointDir } = values;
  return { team, pool, gpus, gpuShare, nodes, timeLimit, priority, env, outputDir, checkpointDir };
}

/** A job name from a file name: "Train model.ipynb" → "train-model". */
export function defaultName(path: string): string {
  const base = path.split('/').pop() ?? '';
  const stem = base.replace(/\.[^.]*$/, '');
  const name = stem
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '')
    .replace(/[-._]+$/, '')
    .slice(0, 128);
  return name || 'job';
}

/** The form's labels, by the form's field names. */
export const FIELD_LABELS: Record<keyof IFormValues, string> = {
  path: 'File',
  name: 'Name',
  team: 'Team',
  pool: 'Pool',
  gpus: 'GPUs per node',
  gpuShare: 'GPU share',
  nodes: 'Nodes',
  timeLimit: 'Time limit',
  priority: 'Priority',
  parameters: 'Parameters',
  env: 'Environment',
  outputDir: 'Output directory',
  checkpointDir: 'Checkpoint directory',
  datasets: 'Datasets',
  afterId: 'Run after',
  afterCondition: 'Run after',
  mode: 'Kind',
  sweepValues: 'Parameter grid',
  sweepLines: 'Parameter grid',
  maxRunning: 'Max running',
  metricName: 'Metric',
  metricGoal: 'Metric',
  scheduleName: 'Schedule name',
  cronKind: 'Repeat',
  cronTime: 'At',
  cronMinute: 'Minute',
  cronWeekday: 'On',
  cronCustom: 'Cron expression',
  timezone: 'Time zone'
};

/** The service's and the server extension's field names → the form's. */
const FORM_FIELDS: Record<string, keyof IFormValues> = {
  time_limit: 'timeLimit',
  gpus_per_node: 'gpus',
  gpu_share: 'gpuShare',
  gpu_memory: 'gpuShare',
  output_dir: 'outputDir',
  checkpoint_dir: 'checkpointDir',
  command: 'path',
  notebook: 'path',
  working_dir: 'path',
  after: 'afterId',
  grid: 'sweepValues',
  tasks: 'sweepValues',
  max_running: 'maxRunning',
  metric: 'metricName',
  'metric.name': 'metricName',
  'metric.goal': 'metricGoal',
  cron: 'cronCustom',
  schedule_name: 'scheduleName'
};

/**
 * A refusal as the form shows it: the field to mark (the form's name) and
 * the message under the label the user sees ("File: …", not "path: …").
 * `message` is the refusal without a field prefix.
 */
export function formProblem(field: string | undefined, message: string): { field?: string; message: string } {
  // a sweep's template and a schedule's spec are the job's fields
  // (and "after[0].id" is the Run after field, "tasks[3].lr" the grid)
  const bare = field?.replace(/^(template|spec)\./, '').replace(/\[\d+\].*$/, '');
  const key = bare ? (FORM_FIELDS[bare] ?? bare) : undefined;
  const label = key ? FIELD_LABELS[key as keyof IFormValues] : undefined;
  return { field: key, message: label ? `${label}: ${message}` : field ? `${field}: ${message}` : message };
}

/** The shares of one GPU the pool offers ("1/4" … "3/4"); none when it does not share its GPUs. */
export function shareChoices(pool: IPool | undefined): string[] {
  const n = pool?.sharing?.share_units ?? 0;
  return Array.from({ length: Math.max(0, n - 1) }, (_, k) => shareFraction((k + 1) / n));
}

/** What the form asks for in GPU units: its share of one GPU, else GPUs per node × nodes. */
export function requestUnits(values: IFormValues): number {
  const share = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(values.gpuShare);
  if (share && Number(share[2]) > 0) {
    return Number(share[1]) / Number(share[2]);
  }
  return Number(values.gpus) * Math.max(1, Number(values.nodes) || 1);
}

/** Why the form cannot be submitted as it is (the GPU count can never fit), else null. */
export function impossibleRequest(values: IFormValues, teams: ITeam[], pools: IPool[]): string | null {
  const view = quotaView(teams, pools, values.team, values.pool);
  const gpus = requestUnits(values);
  if (!view || !Number.isFinite(gpus)) {
    return null;
  }
  const fit = requestFit(view, gpus);
  return fit.kind === 'over' ? fit.message : null;
}

/** One dataset as the form offers it: whether the chosen team and pool may read it, and why not. */
export interface IDatasetChoice {
  name: string;
  /** "team vision's, shared with nlp; only in pool eu". */
  about: string;
  /** Why a job of this team in this pool would be refused it ("" when it would not). */
  refusal: string;
}

/**
 * The datasets the form offers (those the user's teams may read), each
 * with what the service would say of it for the chosen team and pool: the
 * service's own rules (its team's or shared with the team; its residency).
 */
export function datasetChoices(datasets: IDataset[], team: string, pool: string): IDatasetChoice[] {
  return datasets.map(d => {
    const shared = d.shared_with.length ? `, shared with ${d.shared_with.join(', ')}` : '';
    const where = d.pools.length ? `; only in pool${d.pools.length > 1 ? 's' : ''} ${d.pools.join(', ')}` : '';
    let refusal = '';
    if (team && d.team !== team && !d.shared_with.includes(team)) {
      refusal = `team ${team} may not read it`;
    } else if (pool && d.pools.length && !d.pools.includes(pool)) {
      refusal = `not readable in pool ${pool}`;
    }
    return { name: d.name, about: `team ${d.team}'s${shared}${where}`, refusal };
  });
}

export class FormError extends Error {
  constructor(
    readonly field: keyof IFormValues,
    message: string
  ) {
    super(message);
  }
}

/** A parameter value as papermill gets it: JSON when it parses, else text. */
export function parseValue(text: string): unknown {
  const t = text.trim();
  try {
    return JSON.parse(t);
  } catch {
    // Python literals people type
    if (t === 'True' || t === 'False') {
      return t === 'True';
    }
    if (t === 'None') {
      return null;
    }
    return t.replace(/^(['"])(.*)\1$/, '$2');
  }
}

/**
 * "name = value" (or "name: value") lines as name → the value's text;
 * blank lines and # comments skipped. `bad` says what a line that is not
 * one raises (its number from 1, its text).
 */
export function assignmentLines(text: string, bad: (n: number, line: string) => Error): Record<string, string> {
  const out: Record<string, string> = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) {
      return;
    }
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(.*)$/.exec(line);
    if (!m) {
      throw bad(i + 1, line);
    }
    out[m[1]] = m[2];
  });
  return out;
}

/** The Parameters field: "name = value" lines, each value as papermill gets it. */
export function parseParameters(text: string): Record<string, unknown> {
  const lines = assignmentLines(
    text,
    (n, line) => new FormError('parameters', `line ${n}: write name = value, not "${line}"`)
  );
  return Object.fromEntries(Object.entries(lines).map(([k, v]) => [k, parseValue(v)]));
}

/** "NAME=value" lines. */
export function parseEnv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) {
      return;
    }
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (!m) {
      throw new FormError('env', `line ${i + 1}: write NAME=value, not "${line}"`);
    }
    out[m[1]] = m[2];
  });
  return out;
}

/** A whole number as typed; how many may be asked for is the service's to say. */
function wholeNumber(field: keyof IFormValues, text: string): number {
  const n = Number(text.trim());
  if (text.trim() === '' || !Number.isInteger(n)) {
    throw new FormError(field, 'must be a whole number');
  }
  return n;
}

export function toSubmission(values: IFormValues): ISubmission {
  if (!isSubmittable(values.path)) {
    throw new FormError('path', 'choose a notebook (.ipynb), a Python script (.py) or a shell script (.sh)');
  }
  const submission: ISubmission = {
    path: values.path,
    gpus_per_node: wholeNumber('gpus', values.gpus),
    nodes: wholeNumber('nodes', values.nodes),
    parameters: parseParameters(values.parameters),
    env: parseEnv(values.env)
  };
  const optional: [keyof ISubmission, string][] = [
    ['name', values.name],
    ['team', values.team],
    ['pool', values.pool],
    ['time_limit', values.timeLimit],
    ['priority', values.priority],
    ['output_dir', values.outputDir],
    ['checkpoint_dir', values.checkpointDir]
  ];
  for (const [key, value] of optional) {
    if (value.trim()) {
      (submission as any)[key] = value.trim();
    }
  }
  if (values.gpuShare.trim()) {
    submission.gpu_share = values.gpuShare.trim();
  }
  if (values.datasets.length) {
    submission.datasets = [...values.datasets];
  }
  if (values.afterId.trim()) {
    submission.after = [{ id: values.afterId.trim(), condition: values.afterCondition as IDependency['condition'] }];
  }
  return submission;
}

function formatValue(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** The form of a job to edit and rerun ("resubmit"). */
export function formFromJob(job: IWorkload, fallback: IFormValues): IFormValues {
  const params = Object.entries(job.parameters ?? {})
    .map(([k, v]) => `${k} = ${formatValue(v)}`)
    .join('\n');
  const env = Object.entries(job.env ?? {})
    .filter(([k]) => k !== 'OUTPUT_DIR')
    .map(([k, v]) => `${k}=${v}`)
    .join('\n');
  return {
    ...fallback,
    path: job.source_path ?? fallback.path,
    name: job.name,
    team: job.team,
    pool: job.pool,
    gpus: String(job.gpus_per_node),
    gpuShare: job.gpu_share ? shareFraction(job.gpu_share) : '',
    nodes: String(job.nodes ?? 1),
    timeLimit: job.time_limit ? `${Math.round(job.time_limit)}s` : '',
    priority: job.priority,
    parameters: params,
    env,
    outputDir: job.output_dir_path ?? fallback.outputDir,
    checkpointDir: job.checkpoint_path ?? '',
    datasets: [...(job.datasets ?? [])],
    afterId: job.after?.[0]?.id ?? '',
    afterCondition: job.after?.[0]?.condition ?? 'ok'
  };
}
