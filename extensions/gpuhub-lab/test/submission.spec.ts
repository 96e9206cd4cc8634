import {
  defaultName,
  EMPTY_FORM,
  FormError,
  formFromJob,
  formProblem,
  impossibleRequest,
  isSubmittable,
  parseEnv,
  parseParameters,
  remembered,
  requestUnits,
  shareChoices,
  toSubmission
} from '../src/submission';
import { job, POOLS, TEAMS } from './fixtures';

describe('parameters', () => {
  it('reads name = value lines as JSON, Python literals or text', () => {
    expect(
      parseParameters('epochs = 3\nlr: 0.001\n# comment\n\nname = "vit"\nflag = True\nnothing = None\nraw = hello world')
    ).toEqual({ epochs: 3, lr: 0.001, name: 'vit', flag: true, nothing: null, raw: 'hello world' });
  });

  it('names the line that is not name = value', () => {
    expect(() => parseParameters('epochs = 3\n3 = epochs')).toThrow('line 2');
  });
});

describe('environment', () => {
  it('reads NAME=value lines, keeping = in values', () => {
    expect(parseEnv('A=1\nURL=http://x?a=b\n')).toEqual({ A: '1', URL: 'http://x?a=b' });
  });

  it('refuses a line without =', () => {
    expect(() => parseEnv('JUSTANAME')).toThrow(FormError);
  });
});

describe('the submission', () => {
  const values = { ...EMPTY_FORM, path: 'nb/train.ipynb', name: 'train', team: 'vision', pool: 'a100', gpus: '2' };

  it('carries only what was filled in, as the server extension takes it', () => {
    expect(toSubmission({ ...values, parameters: 'epochs = 3', env: 'A=1', timeLimit: ' 2h ' })).toEqual({
      path: 'nb/train.ipynb',
      name: 'train',
      team: 'vision',
      pool: 'a100',
      gpus_per_node: 2,
      nodes: 1,
      time_limit: '2h',
      priority: 'batch',
      parameters: { epochs: 3 },
      env: { A: '1' }
    });
  });

  it('leaves how many GPUs and nodes may be asked for to the service', () => {
    // It refuses with the field named, which the form then marks (formProblem).
    expect(toSubmission({ ...values, gpus: '65', nodes: '0' })).toMatchObject({ gpus_per_node: 65, nodes: 0 });
  });

  it.each([
    ['gpus', { gpus: '1.5' }],
    ['gpus', { gpus: '' }],
    ['nodes', { nodes: 'two' }],
    ['path', { path: 'data.csv' }]
  ])('names the %s field when it is wrong', (field, over) => {
    try {
      toSubmission({ ...values, ...over });
      throw new Error('accepted');
    } catch (e) {
      expect(e).toBeInstanceOf(FormError);
      expect((e as FormError).field).toBe(field);
    }
  });

  it('remembers where and how, not what', () => {
    const kept = remembered({ ...values, parameters: 'a = 1', env: 'A=1', outputDir: 'out' });
    expect(kept).toEqual({
      team: 'vision',
      pool: 'a100',
      gpus: '2',
      gpuShare: '',
      nodes: '1',
      timeLimit: '',
      priority: 'batch',
      env: 'A=1',
      outputDir: 'out',
      checkpointDir: ''
    });
  });
});

describe('file names', () => {
  it('makes job names the service accepts', () => {
    expect(defaultName('dir/Train Model (v2).ipynb')).toBe('train-model-v2');
    expect(defaultName('__init__.py')).toBe('init');
    expect(defaultName('.ipynb')).toBe('job');
  });

  it('knows what can run as a job', () => {
    expect(['a.ipynb', 'b.PY', 'c.sh'].every(isSubmittable)).toBe(true);
    expect(isSubmittable('d.txt')).toBe(false);
    expect(isSubmittable(null)).toBe(false);
  });
});

describe('resubmitting', () => {
  it('fills the form from the job, without the output dir variable', () => {
    const values = formFromJob(
      job({
        source_path: 'nb/train.ipynb',
        parameters: { epochs: 3, name: 'vit' },
        env: { A: '1', OUTPUT_DIR: '/home/alice/outputs/x' },
        output_dir_path: 'outputs/x',
        time_limit: 7200,
        nodes: 2,
        gpus: 4,
        gpus_per_node: 2
      }),
      EMPTY_FORM
    );
    expect(values).toMatchObject({
      path: 'nb/train.ipynb',
      name: 'train',
      team: 'vision',
      pool: 'a100',
      gpus: '2',
      nodes: '2',
      timeLimit: '7200s',
      parameters: 'epochs = 3\nname = vit',
      env: 'A=1',
      outputDir: 'outputs/x'
    });
    // What the form shows goes back as the same job.
    expect(toSubmission(values)).toMatchObject({ parameters: { epochs: 3, name: 'vit' }, gpus_per_node: 2, nodes: 2 });
  });

  it('asks for the datasets the job read', () => {
    const values = formFromJob(job({ source_path: 'train.py', datasets: ['imagenet', 'coco'] }), EMPTY_FORM);
    expect(values.datasets).toEqual(['imagenet', 'coco']);
    expect(toSubmission(values).datasets).toEqual(['imagenet', 'coco']);
    expect(formFromJob(job(), EMPTY_FORM).datasets).toEqual([]);
  });
});

describe('what the dialog says of a refusal', () => {
  it.each([
    ['path', "'x.csv' is not a file", 'path', "File: 'x.csv' is not a file"],
    ['notebook', 'not found', 'path', 'File: not found'],
    ['time_limit', 'must be a duration', 'timeLimit', 'Time limit: must be a duration'],
    ['gpus', 'too many', 'gpus', 'GPUs per node: too many'],
    ['project', 'too long', 'project', 'project: too long'],
    [undefined, 'the service is down', undefined, 'the service is down']
  ])('names %s by its label', (field, message, formField, shown) => {
    expect(formProblem(field, message)).toEqual({ field: formField, message: shown });
  });
});

describe('a request that can never fit', () => {
  const form = { ...EMPTY_FORM, path: 'train.ipynb', team: 'vision', pool: 'a100' };

  it('blocks Submit with the reason the hint gives', () => {
    // vision: 8 nominal + 4 borrowing in a100
    expect(impossibleRequest({ ...form, gpus: '13' }, TEAMS, POOLS)).toBe(
      '13 GPUs is more than team vision may ever hold in a100 (12)'
    );
    expect(impossibleRequest({ ...form, gpus: '4', nodes: '4' }, TEAMS, POOLS)).toContain('16 GPUs');
  });

  it('lets through what fits, borrows or waits, and what it cannot judge', () => {
    expect(impossibleRequest({ ...form, gpus: '12' }, TEAMS, POOLS)).toBeNull();
    expect(impossibleRequest({ ...form, gpus: 'x' }, TEAMS, POOLS)).toBeNull();
    expect(impossibleRequest({ ...form, team: 'nobody', gpus: '99' }, TEAMS, POOLS)).toBeNull();
  });
});

describe('a share of one GPU', () => {
  const sharing = { share_units: 4 as const, gpu_memory_mib: 144384, share_memory_mib: 36096, smallest_share: '1/4' };
  const h200 = { ...POOLS[0], name: 'h200', sharing };
  const form = { ...EMPTY_FORM, path: 'train.py', team: 'vision', pool: 'h200' };

  it('is offered only where the pool shares its GPUs', () => {
    expect(shareChoices(h200)).toEqual(['1/4', '1/2', '3/4']);
    expect(shareChoices({ ...h200, sharing: { ...sharing, share_units: 2 as const } })).toEqual(['1/2']);
    expect(shareChoices(POOLS[0])).toEqual([]);
    expect(shareChoices(undefined)).toEqual([]);
  });

  it('goes to the server extension as gpu_share, and whole GPUs without it', () => {
    expect(toSubmission({ ...form, gpuShare: '1/4' })).toMatchObject({ gpus_per_node: 1, gpu_share: '1/4' });
    expect(toSubmission(form)).not.toHaveProperty('gpu_share');
  });

  it('counts its part against the quota', () => {
    expect(requestUnits({ ...form, gpuShare: '1/4' })).toBe(0.25);
    expect(requestUnits({ ...form, gpus: '2', nodes: '3' })).toBe(6);
  });

  it('is kept when a job on one is resubmitted, and remembered for the next form', () => {
    const values = formFromJob(job({ pool: 'h200', gpus: 1, gpus_per_node: 1, gpu_share: 0.25 }), EMPTY_FORM);
    expect(values).toMatchObject({ pool: 'h200', gpus: '1', gpuShare: '1/4' });
    expect(toSubmission({ ...values, path: 'train.py' })).toMatchObject({ gpu_share: '1/4' });
    expect(remembered(values).gpuShare).toBe('1/4');
    expect(formFromJob(job(), EMPTY_FORM).gpuShare).toBe('');
  });

  it("names the service's refusal of it by its label", () => {
    expect(formProblem('gpu_share', 'pool a100 does not share its GPUs')).toEqual({
      field: 'gpuShare',
      message: 'GPU share: pool a100 does not share its GPUs'
    });
  });
});
