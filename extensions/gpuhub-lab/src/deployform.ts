/**
 * The deploy dialog's values and how they become a deploy request. Pure:
 * the form keeps text, this module checks it (as the user types, with the
 * service's own rules) and parses it.
 */
import { IDeployment, IDeployRequest, IWorkload } from './types';

export const RUNTIMES = ['sklearn', 'predictor'];

/** The service's rule for a deployment name (a DNS label; gpuspawner/service/serving/deployments.py). */
const NAME_RULE = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const PREDICTOR_RULE = /^[^:]+\.py:[A-Za-z_][A-Za-z0-9_]*$/;

export interface IDeployFormValues {
  name: string;
  team: string;
  modelDir: string;
  runtime: string;
  /** "file.py:Class" for the predictor runtime. */
  predictor: string;
  pool: string;
  gpus: string;
  minReplicas: string;
  maxReplicas: string;
  /** With min replicas 0 (CPU only): idle seconds before the last replica stops. */
  scaleToZeroAfter: string;
  /** For a new revision of an existing deployment: start it as a canary. */
  asCanary: boolean;
  canaryPercent: string;
  /** Automatic rollback of the canary: above this error rate, in percent ("" for none). */
  rollbackErrorPercent: string;
  /** … or above this p99 latency in ms ("" for none). */
  rollbackP99Ms: string;
}

export type DeployField = keyof IDeployFormValues;

/** A problem per field, as the form shows them next to the fields. */
export type FieldProblems = Partial<Record<DeployField, string>>;

export const EMPTY_DEPLOY_FORM: IDeployFormValues = {
  name: '',
  team: '',
  modelDir: '',
  runtime: 'sklearn',
  predictor: 'predictor.py:Model', // the service's default
  pool: '',
  gpus: '0',
  minReplicas: '1',
  maxReplicas: '1',
  scaleToZeroAfter: '300',
  asCanary: true,
  canaryPercent: '10',
  rollbackErrorPercent: '',
  rollbackP99Ms: ''
};

/** The service's field names (and the server extension's) → the form's. */
export const SERVICE_FIELDS: Record<string, DeployField> = {
  name: 'name',
  team: 'team',
  model_dir: 'modelDir',
  runtime: 'runtime',
  predictor: 'predictor',
  pool: 'pool',
  gpus: 'gpus',
  min_replicas: 'minReplicas',
  max_replicas: 'maxReplicas',
  scale_to_zero_after: 'scaleToZeroAfter',
  canary_percent: 'canaryPercent',
  rollback: 'rollbackErrorPercent'
};

/** A deployment name from a folder or a job: "models/Iris_v1" → "iris-v1". */
export function deploymentName(path: string): string {
  const base = path.replace(/\/+$/, '').split('/').pop() ?? '';
  const label = base
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .slice(0, 63)
    .replace(/^-+|-+$/g, '');
  return label || 'model';
}

/** What is wrong with a name, or "" (the service's rule, in its words). */
export function nameProblem(name: string): string {
  if (!name) {
    return 'is required';
  }
  if (name.length > 63) {
    return `at most 63 characters (${name.length})`;
  }
  if (!NAME_RULE.test(name)) {
    return "lowercase letters, digits and '-', starting and ending with a letter or digit";
  }
  return '';
}

/** The deployment the form would add a revision to, if the name is taken in the team. */
export function existingDeployment(
  values: Pick<IDeployFormValues, 'name' | 'team'>,
  deployments: IDeployment[]
): IDeployment | undefined {
  return deployments.find(d => d.name === values.name && d.team === values.team);
}

function wholeNumber(text: string, low: number, high: number): number | string {
  const n = Number(text.trim());
  if (!text.trim() || !Number.isInteger(n) || n < low || n > high) {
    return `a whole number from ${low} to ${high}`;
  }
  return n;
}

function optionalNumber(text: string, low: number, high: number): number | string | undefined {
  if (!text.trim()) {
    return undefined;
  }
  const n = Number(text.trim());
  if (!Number.isFinite(n) || n < low || n > high) {
    return `empty, or a number from ${low} to ${high}`;
  }
  return n;
}

/**
 * Every problem of the form at once (empty when it can be sent), and the
 * request it makes. `existing`: the deployment the name already has, whose
 * new revision may start as a canary.
 */
export function checkDeployForm(
  values: IDeployFormValues,
  existing?: IDeployment
): { problems: FieldProblems; request: IDeployRequest | null } {
  const problems: FieldProblems = {};
  const name = nameProblem(values.name);
  if (name) {
    problems.name = name;
  }
  if (!values.modelDir.trim()) {
    problems.modelDir = 'is required: a folder of your files with the model';
  }
  if (!RUNTIMES.includes(values.runtime)) {
    problems.runtime = `one of ${RUNTIMES.join(', ')}`;
  }
  if (values.runtime === 'predictor' && !PREDICTOR_RULE.test(values.predictor.trim())) {
    problems.predictor = 'a file of the model folder and a class in it: predictor.py:Model';
  }
  const gpus = wholeNumber(values.gpus, 0, 16);
  const min = wholeNumber(values.minReplicas, 0, 64);
  const max = wholeNumber(values.maxReplicas, 1, 64);
  for (const [field, value] of [['gpus', gpus], ['minReplicas', min], ['maxReplicas', max]] as const) {
    if (typeof value === 'string') {
      problems[field] = value;
    }
  }
  if (typeof min === 'number' && typeof max === 'number' && max < min) {
    problems.maxReplicas = `at least the minimum (${min})`;
  }
  // Scaling to zero: the service's rule (CPU only, after an idle time).
  const toZero = min === 0;
  const idle = toZero ? wholeNumber(values.scaleToZeroAfter, 10, 604800) : undefined;
  if (typeof idle === 'string') {
    problems.scaleToZeroAfter = idle;
  }
  if (toZero && typeof gpus === 'number' && gpus > 0) {
    problems.minReplicas = 'at least 1 with GPUs (a GPU replica keeps its GPUs warm)';
  }
  const canary = existing && values.asCanary;
  const percent = canary ? wholeNumber(values.canaryPercent, 1, 99) : undefined;
  const errorPercent = canary ? optionalNumber(values.rollbackErrorPercent, 0, 100) : undefined;
  const p99 = canary ? optionalNumber(values.rollbackP99Ms, 1, 600000) : undefined;
  if (typeof percent === 'string') {
    problems.canaryPercent = percent;
  }
  if (typeof errorPercent === 'string') {
    problems.rollbackErrorPercent = errorPercent;
  }
  if (typeof p99 === 'string') {
    problems.rollbackP99Ms = p99;
  }
  if (Object.keys(problems).length) {
    return { problems, request: null };
  }
  const request: IDeployRequest = {
    name: values.name,
    model_dir: values.modelDir.trim(),
    runtime: values.runtime,
    gpus: gpus as number,
    min_replicas: min as number,
    max_replicas: max as number
  };
  if (typeof idle === 'number') {
    request.scale_to_zero_after = idle;
  }
  if (values.team) {
    request.team = values.team;
  }
  if (values.pool) {
    request.pool = values.pool;
  }
  if (values.runtime === 'predictor') {
    request.predictor = values.predictor.trim();
  }
  if (typeof percent === 'number') {
    request.canary_percent = percent;
    const rollback = {
      ...(typeof errorPercent === 'number' ? { error_rate: errorPercent / 100 } : {}),
      ...(typeof p99 === 'number' ? { p99_ms: p99 } : {})
    };
    if (Object.keys(rollback).length) {
      request.rollback = rollback;
    }
  }
  return { problems, request };
}

/**
 * The folder a finished job's model is in: where the server extension found
 * one (model_path), else its output directory (where a job submitted from
 * JupyterLab writes), else its checkpoint directory, else the folder it ran in.
 */
export function modelDirOfJob(job: IWorkload): string {
  return job.model_path ?? job.output_dir_path ?? job.checkpoint_path ?? job.working_dir_path ?? '';
}

/** The form for a new revision keeps the deployment's pool, GPUs and replicas. */
export function withDeploymentSettings(values: IDeployFormValues, d: IDeployment): IDeployFormValues {
  return {
    ...values,
    pool: d.pool,
    gpus: String(d.gpus),
    minReplicas: String(d.min_replicas),
    maxReplicas: String(d.max_replicas),
    scaleToZeroAfter: String(d.scale_to_zero_after ?? values.scaleToZeroAfter)
  };
}
