import { jobNotes, pollInterval, snapshot } from '../src/transitions';
import { job } from './fixtures';

describe('notifications of my jobs', () => {
  const queued = job({ state: 'queued' });

  it('says nothing on the first poll', () => {
    expect(jobNotes(null, [queued])).toEqual([]);
  });

  it('announces start, success and failure once', () => {
    const running = job({ state: 'running' });
    let notes = jobNotes(snapshot([queued]), [running]);
    expect(notes.map(n => [n.kind, n.message])).toEqual([['started', 'Job train started on 2 × a100 GPUs']]);
    expect(jobNotes(snapshot([running]), [running])).toEqual([]);
    const share = job({ state: 'running', gpus: 1, gpu_share: 0.5, pool: 'h200' });
    expect(jobNotes(snapshot([queued]), [share])[0].message).toBe('Job train started on 1/2 of one h200 GPU');
    notes = jobNotes(snapshot([running]), [job({ state: 'succeeded' })]);
    expect(notes.map(n => n.kind)).toEqual(['succeeded']);
    notes = jobNotes(snapshot([running]), [job({ state: 'failed', reason: 'exited with code 3' })]);
    expect(notes[0].message).toBe('Job train failed: exited with code 3');
  });

  it('announces a preemption when the attempt goes up', () => {
    const running = job({ state: 'running', attempt: 0 });
    const requeued = job({ state: 'queued', attempt: 1, reason: 'preempted: reclaimed by nlp' });
    const notes = jobNotes(snapshot([running]), [requeued]);
    expect(notes.map(n => n.kind)).toEqual(['preempted']);
    expect(notes[0].message).toContain('reclaimed by nlp');
    expect(notes[0].message).toContain('attempt 2 is queued');
  });

  it('says once when a queued job is expected to start', () => {
    const expected_start = { time: '2026-11-30T00:12:00Z', text: 'expected to start in ~12 min', basis: 'plan' as const, made_at: '' };
    const estimated = job({ state: 'queued', expected_start });
    let notes = jobNotes(snapshot([queued]), [estimated]);
    expect(notes.map(n => [n.kind, n.message])).toEqual([['queued', 'Job train is queued: expected to start in ~12 min']]);
    expect(jobNotes(snapshot([estimated]), [estimated])).toEqual([]);
    // a job first seen with its estimate (submitted from this panel, polled once)
    notes = jobNotes(new Map(), [estimated]);
    expect(notes.map(n => n.kind)).toEqual(['queued']);
    // unknown is not worth a notification
    const unknown = job({ state: 'queued', expected_start: { ...expected_start, time: null, text: 'start time unknown' } });
    expect(jobNotes(snapshot([queued]), [unknown])).toEqual([]);
  });

  it('announces a job submitted elsewhere only once it moved', () => {
    expect(jobNotes(new Map(), [job({ id: 'w9', state: 'queued' })])).toEqual([]);
    expect(jobNotes(new Map(), [job({ id: 'w9', state: 'succeeded' })]).map(n => n.kind)).toEqual(['succeeded']);
  });
});

describe('how often to poll', () => {
  it('is fast while a job moves and slow otherwise', () => {
    expect(pollInterval([job({ state: 'running' })], 2, 15)).toBe(2);
    expect(pollInterval([job({ state: 'succeeded' })], 2, 15)).toBe(15);
    expect(pollInterval([], 2, 15)).toBe(15);
    // a job just ended: once more soon, so the quota catches up
    expect(pollInterval([job({ state: 'succeeded' })], 2, 15, true)).toBe(2);
  });
});
