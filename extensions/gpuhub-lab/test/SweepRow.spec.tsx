import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { ScheduleList } from '../src/components/Schedules';
import { SweepRow } from '../src/components/SweepRow';
import { ISchedule, ISweep } from '../src/types';
import { job } from './fixtures';

const noop = () => undefined;
const actions = { toggleSweep: noop, sweepAction: noop, openPath: noop, scheduleAction: noop, deleteSchedule: noop, editSchedule: noop };

function buttons(html: string): string[] {
  return Array.from(html.matchAll(/<button[^>]*>([^<]*)<\/button>/g)).map(m => m[1]);
}

const SWEEP: ISweep = {
  id: 's1',
  name: 'lr-sweep',
  team: 'a',
  user: 'alice',
  state: 'failed',
  max_running: 2,
  total: 3,
  counts: { waiting: 0, queued: 0, held: 0, running: 0, stopping: 0, succeeded: 2, failed: 1, cancelled: 0, stopped: 0 },
  metric: { name: 'loss', goal: 'min' },
  best: { index: 1, parameters: { lr: 0.01 }, value: 0.2, workload_id: 'w2' },
  submitted_at: '2026-11-30T00:00:00Z',
  finished_at: '2026-11-30T00:10:00Z',
  after: []
};
const DETAIL: ISweep = {
  ...SWEEP,
  tasks: [
    { index: 2, parameters: { lr: 0.001 }, workload_id: 'w3', state: 'failed', reason: 'exit code 1', metric: null, output_notebook: null, output_path: null },
    { index: 0, parameters: { lr: 0.1 }, workload_id: 'w1', state: 'succeeded', reason: '', metric: 0.5, output_notebook: '/h/o/0.ipynb', output_path: 'o/0.ipynb' },
    { index: 1, parameters: { lr: 0.01 }, workload_id: 'w2', state: 'succeeded', reason: '', metric: 0.2, output_notebook: '/h/o/1.ipynb', output_path: 'o/1.ipynb' }
  ]
};

describe('a sweep in the Jobs panel', () => {
  it('is one row with its progress, and retry for the failed task once ended', () => {
    const html = renderToStaticMarkup(
      <SweepRow id="s1" sweep={SWEEP} tasks={[]} detail={undefined} expanded={false} showUser={false} actions={actions} />
    );
    expect(html).toContain('data-sweep-id="s1"');
    expect(html).toContain('3/3 done · 1 failed');
    expect(html).toContain('data-kind="succeeded" data-count="2"');
    expect(html).toContain('best loss 0.2 (#1)');
    expect(buttons(html)).toEqual(['▸', 'Retry failed']);
    expect(html).not.toContain('gpuhub-Job-after');
    expect(html).not.toContain('gpuhub-Sweep-results');
  });

  it('opened, lists every task in index order with its metric, the best marked, and its notebook', () => {
    const html = renderToStaticMarkup(
      <SweepRow id="s1" sweep={{ ...SWEEP, state: 'running' }} tasks={[]} detail={DETAIL} expanded={true} showUser={false} actions={actions} />
    );
    const rows = Array.from(html.matchAll(/<tr data-index="(\d)"[^>]*class="([^"]*)"/g)).map(m => [m[1], m[2]]);
    expect(rows).toEqual([
      ['0', ''],
      ['1', 'gpuhub-mod-best'],
      ['2', '']
    ]);
    expect(html).toContain('<th>lr</th>');
    expect(html).toContain('★ best');
    expect((html.match(/gpuhub-Sweep-output/g) ?? []).length).toBe(2);
    expect(buttons(html)).toEqual(['▾', 'Cancel all', 'Retry failed']);
  });

  it('says what a sweep runs after', () => {
    const html = renderToStaticMarkup(
      <SweepRow
        id="s1"
        sweep={{ ...SWEEP, state: 'running', after: [{ id: 'w0', condition: 'ok' }] }}
        tasks={[]}
        detail={undefined}
        expanded={false}
        showUser={false}
        actions={actions}
      />
    );
    expect(html).toContain('after w0 (ok)');
  });

  it('shows what a waiting sweep waits for', () => {
    const html = renderToStaticMarkup(
      <SweepRow
        id="s2"
        sweep={null}
        tasks={[job({ id: 'w4', sweep_id: 's2', state: 'waiting', reason: 'waiting for w1 (ok)' })]}
        detail={undefined}
        expanded={false}
        showUser={false}
        actions={actions}
      />
    );
    expect(html).toContain('waiting for w1 (ok)');
    expect(html).toContain('0/1 done · 1 waiting');
  });
});

describe('the Schedules section', () => {
  const schedule = (over: Partial<ISchedule>): ISchedule => ({
    id: 'c1',
    name: 'nightly',
    team: 'a',
    user: 'alice',
    cron: '30 2 * * *',
    timezone: 'Europe/Paris',
    spec: {},
    paused: false,
    catch_up: 'once',
    next_run_at: new Date(Date.now() + 3600_000).toISOString(),
    last_run_at: null,
    last_workload_id: null,
    last_error: null,
    last_error_at: null,
    created_at: '2026-11-30T00:00:00Z',
    updated_at: '2026-11-30T00:00:00Z',
    recent: [],
    ...over
  });

  it('says when each runs next and how the last run went, with pause or resume', () => {
    const html = renderToStaticMarkup(
      <ScheduleList
        schedules={[
          schedule({}),
          schedule({ id: 'c2', paused: true, next_run_at: null, recent: [{ workload_id: 'w1', fired_at: '2026-11-30T00:00:00Z', scheduled_for: '2026-11-30T00:00:00Z', cause: 'cron', state: 'succeeded' }] })
        ]}
        showUser={false}
        actions={actions}
      />
    );
    expect(html).toContain('daily at 02:30 (Europe/Paris)');
    expect(html).toMatch(/next in (59m|1h)/);
    expect(html).toContain('not run yet');
    expect(html).toMatch(/last run [^<]* ago: succeeded/);
    expect(buttons(html)).toEqual(['Pause', 'Run now', 'Edit…', 'Delete', 'Resume', 'Run now', 'Edit…', 'Delete']);
  });

  it("says why the last firing failed, until one succeeds", () => {
    const failed = schedule({ last_error: "spec.pool: unknown pool 'h100'", last_error_at: new Date(Date.now() - 120_000).toISOString() });
    const html = renderToStaticMarkup(<ScheduleList schedules={[failed, schedule({ id: 'c2' })]} showUser={false} actions={actions} />);
    expect(html).toMatch(/last firing failed 2m( 0?[0-9]s)? ago: spec.pool: unknown pool &#x27;h100&#x27;/);
    expect(html.match(/gpuhub-Schedule-error/g)).toHaveLength(1);
  });

  it('is not there without schedules', () => {
    expect(renderToStaticMarkup(<ScheduleList schedules={[]} showUser={false} actions={actions} />)).toBe('');
  });
});
