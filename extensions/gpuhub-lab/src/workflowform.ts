/**
 * The Sweep and Schedule tabs' values as what they send: the job's form
 * (toSubmission) with a grid, a cap and a metric; or with a cron
 * expression and a time zone. Pure.
 */
import { CronError, cronExpression } from './cron';
import { FormError, IFormValues, toSubmission } from './submission';
import { gridFrom, parseGridLines, taskCount } from './sweep';
import { IParameter, IScheduleSubmission, ISweepSubmission } from './types';

/** The grid the Sweep tab describes: the notebook's parameters' rows, or a script's lines. */
export function sweepGrid(values: IFormValues, params: IParameter[]): Record<string, unknown[]> {
  const written = params.length ? values.sweepValues : parseGridLines(values.sweepLines);
  return gridFrom(params, written);
}

/** "4 tasks" as the Sweep tab shows it while one types, or why it cannot count them. */
export function taskSummary(values: IFormValues, params: IParameter[]): { count: number; problem: string } {
  try {
    const count = taskCount(sweepGrid(values, params));
    return { count, problem: '' };
  } catch (e) {
    return { count: 0, problem: (e as Error).message };
  }
}

export function toSweep(values: IFormValues, params: IParameter[]): ISweepSubmission {
  const grid = sweepGrid(values, params);
  if (taskCount(grid) === 0) {
    throw new FormError('sweepValues', 'give at least one parameter a list of values');
  }
  const sweep: ISweepSubmission = { ...toSubmission(values), grid };
  const cap = values.maxRunning.trim();
  if (cap) {
    const n = Number(cap);
    if (!Number.isInteger(n) || n < 1) {
      throw new FormError('maxRunning', 'must be a whole number of at least 1 (or empty: no cap)');
    }
    sweep.max_running = n;
  }
  if (values.metricName.trim()) {
    sweep.metric = { name: values.metricName.trim(), goal: values.metricGoal };
  }
  return sweep;
}

export function toSchedule(values: IFormValues): IScheduleSubmission {
  let cron: string;
  try {
    cron = cronOf(values);
  } catch (e) {
    throw e instanceof CronError ? new FormError(e.field, e.message) : e;
  }
  const { after: _after, ...job } = toSubmission(values); // a schedule's runs wait for nothing
  const schedule: IScheduleSubmission = { ...job, cron, timezone: values.timezone.trim() || 'UTC' };
  if (values.scheduleName.trim()) {
    schedule.schedule_name = values.scheduleName.trim();
  }
  return schedule;
}

/** The Schedule tab's choice as a cron expression (its preview), or "" while a field is wrong. */
export function cronPreview(values: IFormValues): string {
  try {
    return cronOf(values);
  } catch {
    return '';
  }
}

function cronOf(values: IFormValues): string {
  return cronExpression({
    kind: values.cronKind,
    time: values.cronTime,
    minute: values.cronMinute,
    weekday: values.cronWeekday,
    custom: values.cronCustom
  });
}

/** The dialog's accept button: "Submit", "Submit 4 tasks", "Create schedule". */
export function acceptLabel(values: IFormValues, params: IParameter[]): string {
  if (values.mode === 'schedule') {
    return 'Create schedule';
  }
  if (values.mode === 'sweep') {
    const { count, problem } = taskSummary(values, params);
    return problem ? 'Submit sweep' : `Submit ${count} task${count === 1 ? '' : 's'}`;
  }
  return 'Submit';
}
