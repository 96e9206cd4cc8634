import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { IJobActions, JobRow } from '../src/components/JobRow';
import { job } from './fixtures';

const actions: IJobActions = {
  cancel: () => undefined,
  resubmit: () => undefined,
  openLogs: () => undefined,
  openOutput: () => undefined,
  downloadOutputs: () => undefined,
  deploy: () => undefined
};

function buttons(html: string): string[] {
  return Array.from(html.matchAll(/<button[^>]*>([^<]*)<\/button>/g)).map(m => m[1]);
}

describe('a job in the Jobs panel', () => {
  it('shows where a queued job waits, and can be cancelled', () => {
    const html = renderToStaticMarkup(
      <JobRow job={job({ queue_position: 1, reason: 'team vision holds 8' })} showUser={false} actions={actions} />
    );
    expect(html).toContain('data-state="queued"');
    expect(html).toContain('#1 in queue: team vision holds 8');
    expect(html).toContain('2 × a100');
    expect(buttons(html)).toEqual(['Logs', 'Resubmit', 'Cancel']);
  });

  it('offers the output notebook and the outputs of a finished job, not cancel', () => {
    const finished = job({
      state: 'succeeded',
      started_at: '2026-11-30T00:00:00Z',
      finished_at: '2026-11-30T00:03:05Z',
      output_path: 'outputs/train-1/train.ipynb',
      output_dir_path: 'outputs/train-1',
      attempt: 1,
      attempts: [{ state: 'preempted' }, { state: 'succeeded' }] as any
    });
    const html = renderToStaticMarkup(<JobRow job={finished} showUser={true} actions={actions} />);
    expect(buttons(html)).toEqual(['Logs', 'Output', 'Download', 'Deploy outputs…', 'Resubmit']);
    expect(html).toContain('3m 05s');
    expect(html).toContain('attempt 2 (1 preempted)');
    expect(html).toContain('alice (vision)');
  });

  it('offers no deployment of what a failed job left', () => {
    const failed = job({ state: 'failed', output_dir_path: 'outputs/train-1', exit_code: 1 });
    const html = renderToStaticMarkup(<JobRow job={failed} showUser={false} actions={actions} />);
    expect(buttons(html)).toEqual(['Logs', 'Download', 'Resubmit']);
  });
});
