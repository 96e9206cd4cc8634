import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { ScheduleEditForm } from '../src/components/ScheduleEditForm';
import { editValues, IScheduleEditValues, schedulePatch } from '../src/scheduleedit';
import { ISchedule } from '../src/types';

const nightly: ISchedule = {
  id: 'c0123456789ab',
  name: 'nightly',
  team: 'a',
  user: 'alice',
  cron: '30 2 * * *',
  timezone: 'Europe/Paris',
  spec: {},
  paused: false,
  catch_up: 'once',
  next_run_at: null,
  last_run_at: null,
  last_workload_id: null,
  last_error: null,
  last_error_at: null,
  created_at: '2026-11-30T00:00:00Z',
  updated_at: '2026-11-30T00:00:00Z',
  recent: []
};

describe("a schedule's edit form", () => {
  const typed = (over: Partial<IScheduleEditValues>): IScheduleEditValues => ({ ...editValues(nightly), ...over });

  // [what one changes, the form's values, the PATCH body it sends]
  const sent: [string, IScheduleEditValues, object][] = [
    ['nothing', typed({}), {}],
    ['the time, with stray spaces', typed({ cron: ' 0  6 * * 1-5 ' }), { cron: '0 6 * * 1-5' }],
    ['the time zone and the name', typed({ timezone: 'UTC', name: 'early' }), { name: 'early', timezone: 'UTC' }],
    ['what happens to missed firings', typed({ catchUp: 'skip' }), { catch_up: 'skip' }]
  ];
  it.each(sent)('sends only what changed: %s', (_what, values, patch) => {
    expect(schedulePatch(nightly, values)).toEqual({ patch, problems: {} });
  });

  const refused: [string, IScheduleEditValues, string][] = [
    ['an empty cron expression', typed({ cron: '  ' }), 'cron'],
    ['an empty time zone', typed({ timezone: '' }), 'timezone'],
    ['an empty name', typed({ name: ' ' }), 'name']
  ];
  it.each(refused)('keeps the dialog open on %s, saying so next to the field', (_what, values, field) => {
    const { patch, problems } = schedulePatch(nightly, values);
    expect(patch).toBeNull();
    expect(Object.keys(problems)).toEqual([field]);
  });

  it('starts from the schedule, says the expression in words, and shows the service refusal at its field', () => {
    const html = renderToStaticMarkup(
      <ScheduleEditForm
        initial={editValues(nightly)}
        problems={{ timezone: 'unknown time zone "Mars/Olympus"' }}
        error=""
        onChange={() => undefined}
      />
    );
    expect(html).toMatch(/name="cron"[^>]*value="30 2 \* \* \*"/);
    expect(html).toContain('daily at 02:30');
    expect(html).toContain('name="timezone" value="Europe/Paris"');
    expect(html).toMatch(/<option value="once" selected="">run once<\/option>/);
    expect(html).toContain('unknown time zone &quot;Mars/Olympus&quot;');
  });
});
