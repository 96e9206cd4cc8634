import {
  checkDeployForm,
  deploymentName,
  EMPTY_DEPLOY_FORM,
  existingDeployment,
  IDeployFormValues,
  modelDirOfJob,
  nameProblem,
  withDeploymentSettings
} from '../src/deployform';
import { deployment, job } from './fixtures';

const form = (over: Partial<IDeployFormValues> = {}): IDeployFormValues => ({
  ...EMPTY_DEPLOY_FORM,
  name: 'iris',
  team: 'vision',
  pool: 'a100',
  modelDir: 'models/iris-v1',
  ...over
});

describe('the deployment name, checked as it is typed', () => {
  it.each(['iris', 'iris-v1', 'a', '9lives', 'x'.repeat(63)])('takes %s', name => {
    expect(nameProblem(name)).toBe('');
  });

  it.each([
    ['', 'is required'],
    ['Iris', 'lowercase'],
    ['iris_v1', 'lowercase'],
    ['-iris', 'starting and ending'],
    ['iris-', 'starting and ending'],
    ['x'.repeat(64), 'at most 63 characters (64)']
  ])('refuses "%s": %s', (name, words) => {
    expect(nameProblem(name)).toContain(words);
  });

  it('is made from a folder or a job name', () => {
    expect(deploymentName('models/Iris_v1/')).toBe('iris-v1');
    expect(deploymentName('outputs/train-20261130-031000')).toBe('train-20261130-031000');
    expect(deploymentName('__')).toBe('model');
  });
});

describe('the deploy form', () => {
  it('scales a CPU deployment to zero after an idle time, never a GPU one', () => {
    const cpu = checkDeployForm(form({ gpus: '0', minReplicas: '0', maxReplicas: '2', scaleToZeroAfter: '120' }));
    expect(cpu.problems).toEqual({});
    expect(cpu.request).toMatchObject({ min_replicas: 0, scale_to_zero_after: 120 });
    expect(checkDeployForm(form({ minReplicas: '1' })).request?.scale_to_zero_after).toBeUndefined();
    const gpu = checkDeployForm(form({ gpus: '1', minReplicas: '0', maxReplicas: '2' }));
    expect(gpu.problems.minReplicas).toContain('with GPUs');
    expect(checkDeployForm(form({ gpus: '0', minReplicas: '0', scaleToZeroAfter: '3' })).problems).toEqual({
      scaleToZeroAfter: 'a whole number from 10 to 604800'
    });
  });

  it('makes the request of a first deployment, without canary settings', () => {
    const { problems, request } = checkDeployForm(form({ gpus: '1', minReplicas: '1', maxReplicas: '3' }));
    expect(problems).toEqual({});
    expect(request).toEqual({
      name: 'iris',
      team: 'vision',
      pool: 'a100',
      model_dir: 'models/iris-v1',
      runtime: 'sklearn',
      gpus: 1,
      min_replicas: 1,
      max_replicas: 3
    });
  });

  it('sends the predictor only for the predictor runtime, and checks its file:Class form', () => {
    expect(checkDeployForm(form({ runtime: 'predictor', predictor: 'serve.py:Iris' })).request?.predictor).toBe(
      'serve.py:Iris'
    );
    expect(checkDeployForm(form({ runtime: 'predictor', predictor: 'serve.py' })).problems.predictor).toContain(
      'predictor.py:Model'
    );
  });

  it('names every wrong field at once, and sends nothing', () => {
    const { problems, request } = checkDeployForm(
      form({ name: 'Iris', modelDir: ' ', gpus: '1.5', minReplicas: '3', maxReplicas: '2' })
    );
    expect(request).toBeNull();
    expect(Object.keys(problems).sort()).toEqual(['gpus', 'maxReplicas', 'modelDir', 'name']);
    expect(problems.maxReplicas).toBe('at least the minimum (3)');
  });

  it('makes a new revision of an existing deployment a canary with its rollback rule', () => {
    const existing = deployment();
    const values = form({ canaryPercent: '20', rollbackErrorPercent: '5', rollbackP99Ms: '250' });
    expect(checkDeployForm(values, existing).request).toMatchObject({
      canary_percent: 20,
      rollback: { error_rate: 0.05, p99_ms: 250 }
    });
    // Not as a canary: it takes all traffic, no rule.
    const all = checkDeployForm({ ...values, asCanary: false }, existing).request;
    expect(all?.canary_percent).toBeUndefined();
    expect(all?.rollback).toBeUndefined();
    // Without thresholds, no rule is sent.
    expect(checkDeployForm(form(), existing).request?.rollback).toBeUndefined();
  });

  it('checks the canary share and thresholds only for a new revision', () => {
    const bad = form({ canaryPercent: '100', rollbackErrorPercent: 'lots' });
    expect(checkDeployForm(bad).problems).toEqual({});
    const { problems } = checkDeployForm(bad, deployment());
    expect(problems.canaryPercent).toBe('a whole number from 1 to 99');
    expect(problems.rollbackErrorPercent).toContain('a number from 0 to 100');
  });

  it('recognises a name taken in the same team only, and keeps that deployment’s settings', () => {
    const d = deployment({ gpus: 2, min_replicas: 2, max_replicas: 4 });
    expect(existingDeployment(form(), [d])).toBe(d);
    expect(existingDeployment(form({ team: 'nlp' }), [d])).toBeUndefined();
    expect(withDeploymentSettings(form(), d)).toMatchObject({ gpus: '2', minReplicas: '2', maxReplicas: '4' });
  });
});

describe('the folder a finished job offers to deploy', () => {
  it('is its output directory, else its checkpoint directory, else where it ran', () => {
    const paths = { output_dir_path: 'outputs/t-1', checkpoint_path: 'ckpt/t', working_dir_path: 'iris' };
    expect(modelDirOfJob(job(paths))).toBe('outputs/t-1');
    expect(modelDirOfJob(job({ ...paths, output_dir_path: null }))).toBe('ckpt/t');
    expect(modelDirOfJob(job({ ...paths, output_dir_path: null, checkpoint_path: null }))).toBe('iris');
    expect(modelDirOfJob(job())).toBe('');
  });
});
