/**
 * The Schedule tab's shortcuts as cron expressions (as jupyter-scheduler
 * offers them), and back to words for the Schedules list. Pure; whether an
 * expression is good is the service's to say (its refusal names the field).
 */

export type CronKind = 'hourly' | 'daily' | 'weekdays' | 'weekly' | 'custom';

export const CRON_KINDS: { kind: CronKind; label: string }[] = [
  { kind: 'hourly', label: 'Every hour' },
  { kind: 'daily', label: 'Every day' },
  { kind: 'weekdays', label: 'Every weekday (Mon-Fri)' },
  { kind: 'weekly', label: 'Every week' },
  { kind: 'custom', label: 'Custom (cron expression)' }
];

export const WEEKDAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];

export interface ICronChoice {
  kind: CronKind;
  /** "HH:MM" (daily, weekdays, weekly). */
  time: string;
  /** Minute past the hour (hourly). */
  minute: string;
  /** 0 (Sunday) to 6 (weekly). */
  weekday: string;
  /** The expression itself (custom). */
  custom: string;
}

/** What a choice is wrong in: the form's field and why. */
export class CronError extends Error {
  constructor(
    readonly field: 'cronTime' | 'cronMinute' | 'cronCustom',
    message: string
  ) {
    super(message);
  }
}

function hourMinute(time: string): [number, number] {
  const m = /^(\d{1,2}):(\d{2})$/.exec(time.trim());
  const h = m ? Number(m[1]) : NaN;
  const min = m ? Number(m[2]) : NaN;
  if (!(h >= 0 && h <= 23 && min >= 0 && min <= 59)) {
    throw new CronError('cronTime', `"${time}" is not a time of day (HH:MM, e.g. 09:30)`);
  }
  return [h, min];
}

/** The 5-field cron expression of a shortcut: "daily at 09:30" → "30 9 * * *". */
export function cronExpression(c: ICronChoice): string {
  switch (c.kind) {
    case 'hourly': {
      const m = Number(c.minute.trim() || '0');
      if (!Number.isInteger(m) || m < 0 || m > 59) {
        throw new CronError('cronMinute', `"${c.minute}" is not a minute from 0 to 59`);
      }
      return `${m} * * * *`;
    }
    case 'daily':
    case 'weekdays':
    case 'weekly': {
      const [h, m] = hourMinute(c.time);
      const dow = c.kind === 'daily' ? '*' : c.kind === 'weekdays' ? '1-5' : String(Number(c.weekday) || 0);
      return `${m} ${h} * * ${dow}`;
    }
    default: {
      const expr = c.custom.trim().replace(/\s+/g, ' ');
      if (!expr) {
        throw new CronError('cronCustom', 'write a cron expression: minute hour day-of-month month day-of-week');
      }
      return expr;
    }
  }
}

const pad = (n: string) => n.padStart(2, '0');

/** A cron expression in words when it is one of the shortcuts' ("weekdays at 09:30"), else as it is. */
export function describeCron(expr: string): string {
  const named: Record<string, string> = {
    '@hourly': 'hourly',
    '@daily': 'daily at 00:00',
    '@weekly': 'weekly on Sunday at 00:00',
    '@monthly': 'monthly on the 1st at 00:00'
  };
  if (named[expr]) {
    return named[expr];
  }
  const f = expr.trim().split(/\s+/);
  const num = (s: string) => /^\d+$/.test(s);
  if (f.length !== 5 || !num(f[0]) || f[2] !== '*' || f[3] !== '*') {
    return expr;
  }
  if (f[1] === '*' && f[4] === '*') {
    return f[0] === '0' ? 'hourly' : `hourly at :${pad(f[0])}`;
  }
  if (!num(f[1])) {
    return expr;
  }
  const at = `at ${pad(f[1])}:${pad(f[0])}`;
  if (f[4] === '*') {
    return `daily ${at}`;
  }
  if (f[4] === '1-5') {
    return `weekdays ${at}`;
  }
  if (num(f[4]) && Number(f[4]) <= 7) {
    return `weekly on ${WEEKDAYS[Number(f[4]) % 7]} ${at}`;
  }
  return expr;
}

/** The browser's time zone (IANA name), the Schedule tab's default. */
export function browserTimezone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}
