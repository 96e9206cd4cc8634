import { CronError, cronExpression, describeCron, ICronChoice } from '../src/cron';

const choice = (over: Partial<ICronChoice>): ICronChoice => ({
  kind: 'daily',
  time: '09:00',
  minute: '0',
  weekday: '1',
  custom: '',
  ...over
});

describe('cron shortcuts', () => {
  it.each([
    [{ kind: 'hourly', minute: '15' }, '15 * * * *', 'hourly at :15'],
    [{ kind: 'hourly', minute: '' }, '0 * * * *', 'hourly'],
    [{ kind: 'daily', time: '09:30' }, '30 9 * * *', 'daily at 09:30'],
    [{ kind: 'daily', time: '0:05' }, '5 0 * * *', 'daily at 00:05'],
    [{ kind: 'weekdays', time: '18:00' }, '0 18 * * 1-5', 'weekdays at 18:00'],
    [{ kind: 'weekly', time: '07:45', weekday: '0' }, '45 7 * * 0', 'weekly on Sunday at 07:45'],
    [{ kind: 'weekly', time: '23:59', weekday: '5' }, '59 23 * * 5', 'weekly on Friday at 23:59'],
    [{ kind: 'custom', custom: '  */15  * * * * ' }, '*/15 * * * *', '*/15 * * * *'],
    [{ kind: 'custom', custom: '@daily' }, '@daily', 'daily at 00:00']
  ] as [Partial<ICronChoice>, string, string][])('%j is %s (%s)', (over, expr, words) => {
    expect(cronExpression(choice(over))).toBe(expr);
    expect(describeCron(expr)).toBe(words);
  });

  it.each([
    [{ kind: 'daily', time: '25:00' }, 'cronTime', 'not a time of day'],
    [{ kind: 'weekdays', time: '9' }, 'cronTime', 'not a time of day'],
    [{ kind: 'hourly', minute: '60' }, 'cronMinute', 'not a minute'],
    [{ kind: 'custom', custom: ' ' }, 'cronCustom', 'write a cron expression']
  ] as [Partial<ICronChoice>, string, string][])('%j is refused in %s', (over, field, words) => {
    expect(() => cronExpression(choice(over))).toThrow(words);
    try {
      cronExpression(choice(over));
    } catch (e) {
      expect((e as CronError).field).toBe(field);
    }
  });

  it('leaves other expressions as they are', () => {
    expect(describeCron('0 9 1 * *')).toBe('0 9 1 * *');
    expect(describeCron('0 9-17 * * *')).toBe('0 9-17 * * *');
  });
});
