import { EMPTY_FORM, FormError, formProblem, IFormValues } from '../src/submission';
import { IParameter } from '../src/types';
import { acceptLabel, cronPreview, taskSummary, toSchedule, toSweep } from '../src/workflowform';

const PARAMS: IParameter[] = [
  { name: 'lr', default: '0.1', inferred_type_name: 'None', help: '', type: 'float' },
  { name: 'epochs', default: '1', inferred_type_name: 'None', help: '', type: 'int' }
];
const form = (over: Partial<IFormValues>): IFormValues => ({
  ...EMPTY_FORM,
  path: 'train.ipynb',
  name: 'train',
  team: 'a',
  pool: 'default',
  parameters: 'lr = 0.1\nepochs = 1',
  ...over
});

describe('the Sweep tab', () => {
  it('sends the job’s form with the grid, the cap and the metric', () => {
    const values = form({
      mode: 'sweep',
      sweepValues: { lr: '0.1, 0.01', epochs: '1, 2' },
      maxRunning: '2',
      metricName: ' loss ',
      metricGoal: 'min'
    });
    const sweep = toSweep(values, PARAMS);
    expect(sweep.grid).toEqual({ lr: [0.1, 0.01], epochs: [1, 2] });
    expect(sweep.max_running).toBe(2);
    expect(sweep.metric).toEqual({ name: 'loss', goal: 'min' });
    expect(sweep.path).toBe('train.ipynb');
    expect(sweep.parameters).toEqual({ lr: 0.1, epochs: 1 });
    expect(taskSummary(values, PARAMS)).toEqual({ count: 4, problem: '' });
    expect(acceptLabel(values, PARAMS)).toBe('Submit 4 tasks');
  });

  it('has no cap nor metric unless given', () => {
    const sweep = toSweep(form({ mode: 'sweep', sweepValues: { lr: '0.5' } }), PARAMS);
    expect(sweep.max_running).toBeUndefined();
    expect(sweep.metric).toBeUndefined();
    expect(acceptLabel(form({ mode: 'sweep', sweepValues: { lr: '0.5' } }), PARAMS)).toBe('Submit 1 task');
  });

  it.each([
    [{ sweepValues: {} }, 'sweepValues', 'give at least one parameter'],
    [{ sweepValues: { lr: '0.1' }, maxRunning: '0' }, 'maxRunning', 'at least 1'],
    [{ sweepValues: { lr: '0.1' }, maxRunning: '1.5' }, 'maxRunning', 'at least 1']
  ])('refuses %j in %s', (over, field, words) => {
    expect(() => toSweep(form({ mode: 'sweep', ...over }), PARAMS)).toThrow(words);
    try {
      toSweep(form({ mode: 'sweep', ...over }), PARAMS);
    } catch (e) {
      expect((e as FormError).field).toBe(field);
    }
  });

  it('says why it cannot count the tasks while a value is wrong', () => {
    const values = form({ mode: 'sweep', sweepValues: { epochs: '1, two' } });
    expect(taskSummary(values, PARAMS)).toEqual({ count: 0, problem: 'epochs: "two" is not a whole number (the default is one)' });
    expect(acceptLabel(values, PARAMS)).toBe('Submit sweep');
  });

  it('reads a script’s lines when there is no parameters cell', () => {
    const sweep = toSweep(form({ path: 'train.py', mode: 'sweep', sweepLines: 'lr = 0.1, 0.2, 0.3' }), []);
    expect(sweep.grid).toEqual({ lr: [0.1, 0.2, 0.3] });
  });
});

describe('the Schedule tab', () => {
  it('sends the cron expression of the shortcut, the time zone and the name', () => {
    const values = form({ mode: 'schedule', cronKind: 'weekdays', cronTime: '07:30', timezone: 'Europe/Paris', scheduleName: 'nightly', afterId: 'w1' });
    const schedule = toSchedule(values);
    expect(schedule.cron).toBe('30 7 * * 1-5');
    expect(schedule.timezone).toBe('Europe/Paris');
    expect(schedule.schedule_name).toBe('nightly');
    expect(schedule.after).toBeUndefined(); // a schedule's runs wait for nothing
    expect(cronPreview(values)).toBe('30 7 * * 1-5');
    expect(acceptLabel(values, [])).toBe('Create schedule');
  });

  it('names the field of a bad time', () => {
    const values = form({ mode: 'schedule', cronKind: 'daily', cronTime: '7h' });
    expect(cronPreview(values)).toBe('');
    try {
      toSchedule(values);
      throw new Error('not refused');
    } catch (e) {
      expect(e).toBeInstanceOf(FormError);
      expect((e as FormError).field).toBe('cronTime');
    }
  });
});

describe('the service’s refusals of a sweep or a schedule', () => {
  it.each([
    ['max_running', 'must be at least 1', 'maxRunning', 'Max running: must be at least 1'],
    ['cron', 'bad minute field', 'cronCustom', 'Cron expression: bad minute field'],
    ['timezone', 'unknown time zone Mars/Base', 'timezone', 'Time zone: unknown time zone Mars/Base'],
    ['template.gpus_per_node', 'must be at most 64', 'gpus', 'GPUs per node: must be at most 64'],
    ['spec.time_limit', 'soon', 'timeLimit', 'Time limit: soon'],
    ['after', 'unknown id w9', 'afterId', 'Run after: unknown id w9'],
    ['after[0].id', 'no workload or sweep w9', 'afterId', 'Run after: no workload or sweep w9'],
    ['tasks[3].lr', 'must be a number', 'sweepValues', 'Parameter grid: must be a number']
  ])('%s is shown at the form’s %s', (field, message, key, shown) => {
    expect(formProblem(field, message)).toEqual({ field: key, message: shown });
  });
});
