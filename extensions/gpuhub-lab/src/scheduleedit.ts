/**
 * The Schedules list's edit form: a schedule's name, cron expression, time
 * zone and catch-up as text, and back as the PATCH body with only what
 * changed. Pure; whether a cron expression or a time zone is good is the
 * service's to say (its refusal names the field, shown next to it).
 */
import { ISchedule } from './types';

export interface IScheduleEditValues {
  name: string;
  cron: string;
  timezone: string;
  catchUp: 'once' | 'skip';
}

export type ScheduleEditField = keyof IScheduleEditValues;
export type ScheduleEditProblems = Partial<Record<ScheduleEditField, string>>;

/** What the service calls each field (its refusals name these). */
export const SERVICE_FIELDS: Record<string, ScheduleEditField> = {
  name: 'name',
  cron: 'cron',
  timezone: 'timezone',
  catch_up: 'catchUp'
};

export interface ISchedulePatch {
  name?: string;
  cron?: string;
  timezone?: string;
  catch_up?: 'once' | 'skip';
}

export function editValues(s: ISchedule): IScheduleEditValues {
  return { name: s.name, cron: s.cron, timezone: s.timezone, catchUp: s.catch_up };
}

/** The PATCH body (only the fields that changed), or the problems of the form. */
export function schedulePatch(
  s: ISchedule,
  values: IScheduleEditValues
): { patch: ISchedulePatch | null; problems: ScheduleEditProblems } {
  const problems: ScheduleEditProblems = {};
  const name = values.name.trim();
  const cron = values.cron.trim().replace(/\s+/g, ' ');
  const timezone = values.timezone.trim();
  if (!name) {
    problems.name = 'give the schedule a name';
  }
  if (!cron) {
    problems.cron = 'write a cron expression: minute hour day-of-month month day-of-week';
  }
  if (!timezone) {
    problems.timezone = 'a time zone such as UTC or Europe/Paris';
  }
  if (Object.keys(problems).length) {
    return { patch: null, problems };
  }
  const patch: ISchedulePatch = {};
  if (name !== s.name) {
    patch.name = name;
  }
  if (cron !== s.cron) {
    patch.cron = cron;
  }
  if (timezone !== s.timezone) {
    patch.timezone = timezone;
  }
  if (values.catchUp !== s.catch_up) {
    patch.catch_up = values.catchUp;
  }
  return { patch, problems };
}
