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

  it('shows a share of one GPU as the share, not as one GPU', () => {
    const html = renderToStaticMarkup(
      <JobRow job={job({ state: 'running', gpus: 1, gpus_per_node: 1, gpus_total: 1, gpu_share: 0.25, pool: 'h200' })} showUser={false} actions={actions} />
    );
    expect(html).toContain('title="share of one GPU × pool">1/4 GPU × h200</span>');
  });

  it('offers the output notebook and the outputs of a finished job, not cancel', () => {
    const finished = job({
      state: 'succeeded',
      started_at: '2026-11-30T00:00:00Z',
      finished_at: '2026-11-30T00:03:05Z',
      output_path: 'outputs/train-1/train.ipynb',
      output_dir_path: 'outputs/train-1',
      model_path: 'outputs/train-1',
      attempt: 1,
      attempts: [
        { number: 0, state: 'preempted', reason: 'preempted by w9 (team nlp)', started_at: '2026-11-30T00:00:00Z', ended_at: '2026-11-30T00:02:05Z' },
        { number: 1, state: 'succeeded', reason: '', started_at: '2026-11-30T00:00:00Z', ended_at: '2026-11-30T00:03:05Z' }
      ] as any
    });
    const html = renderToStaticMarkup(<JobRow job={finished} showUser={true} actions={actions} />);
    expect(buttons(html)).toEqual(['log', 'log', 'Logs', 'Output', 'Download', 'Deploy outputs…', 'Resubmit']);
    expect(html).toContain('3m 05s');
    expect(html).toContain('attempt 2 (1 preempted)');
    expect(html).toContain('alice (vision)');
  });

  it('lists the attempts of a preempted job, each with its log', () => {
    const opened: [string, number | undefined][] = [];
    const requeued = job({
      state: 'queued',
      attempt: 1,
      // the service lists an attempt once admitted: the requeued one is not there yet
      attempts: [
        { number: 0, state: 'preempted', reason: 'preempted by w9 (team nlp)', started_at: '2026-11-30T00:00:00Z', ended_at: '2026-11-30T00:02:05Z' }
      ] as any
    });
    const html = renderToStaticMarkup(<JobRow job={requeued} showUser={false} actions={actions} />);
    expect(html).toContain('attempt 1: preempted after 2m 05s (preempted by w9 (team nlp))');
    expect(html).toContain('attempt 2: queued');
    expect(html).toContain('data-attempt="0"');
    // the buttons call openLogs with the attempt's number
    const element = JobRow({ job: requeued, showUser: false, actions: { ...actions, openLogs: (j, a) => opened.push([j.id, a]) } });
    const list = (element.props.children as any[]).find((c: any) => c?.props?.className === 'gpuhub-Job-attemptList');
    list.props.children[0].props.children[1].props.onClick();
    expect(opened).toEqual([['w1', 0]]);
  });

  it('offers to deploy a succeeded job only when it wrote a model', () => {
    const noModel = job({ state: 'succeeded', output_dir_path: 'outputs/train-1', model_path: null });
    const html = renderToStaticMarkup(<JobRow job={noModel} showUser={false} actions={actions} />);
    expect(buttons(html)).toEqual(['Logs', 'Download', 'Resubmit']);
  });

  it('offers no deployment of what a failed job left', () => {
    const failed = job({ state: 'failed', output_dir_path: 'outputs/train-1', exit_code: 1 });
    const html = renderToStaticMarkup(<JobRow job={failed} showUser={false} actions={actions} />);
    expect(buttons(html)).toEqual(['Logs', 'Download', 'Resubmit']);
  });
});
