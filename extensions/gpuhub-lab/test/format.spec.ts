import {
  afterText,
  attemptHeader,
  attemptLine,
  attemptsText,
  duration,
  gpuUnits,
  gpusText,
  isActive,
  shareFraction,
  joinLog,
  relativeTime,
  runTime,
  stateDetail,
  tail
} from '../src/format';
import { errorFrom, xsrfToken } from '../src/errors';
import { IAttempt } from '../src/types';
import { job } from './fixtures';

describe('the Jobs panel text', () => {
  it('writes durations', () => {
    expect(duration(42)).toBe('42s');
    expect(duration(185)).toBe('3m 05s');
    expect(duration(3720)).toBe('1h 02m');
  });

  it('counts run time to now while running, to the end once finished', () => {
    const now = Date.parse('2026-11-30T00:10:00Z');
    expect(runTime(job({ state: 'running', started_at: '2026-11-30T00:09:00Z' }), now)).toBe('1m 00s');
    const done = job({ state: 'succeeded', started_at: '2026-11-30T00:00:00Z', finished_at: '2026-11-30T00:00:30Z' });
    expect(runTime(done, now)).toBe('30s');
    expect(runTime(job(), now)).toBe('');
  });

  it('says where a queued job stands and why', () => {
    expect(stateDetail(job({ queue_position: 2, reason: 'team vision holds 8' }))).toBe('#2 in queue: team vision holds 8');
    expect(stateDetail(job({ state: 'failed', exit_code: 3, reason: '' }))).toBe('exit code 3');
    const expected_start = {
      time: '2026-11-30T00:12:00Z',
      text: 'expected to start in ~12 min (between 5 min and 30 min)',
      basis: 'plan' as const,
      made_at: '2026-11-30T00:00:00Z'
    };
    expect(stateDetail(job({ queue_position: 1, reason: 'waiting for 2 × a100 GPUs', expected_start }))).toBe(
      '#1 in queue · expected to start in ~12 min (between 5 min and 30 min): waiting for 2 × a100 GPUs'
    );
  });

  it('counts attempts and preemptions', () => {
    expect(attemptsText(job())).toBe('');
    const attempts = [
      { number: 0, state: 'preempted' },
      { number: 1, state: 'running' }
    ] as any;
    expect(attemptsText(job({ attempt: 1, attempts }))).toBe('attempt 2 (1 preempted)');
  });
});

describe('the log tail', () => {
  it('keeps the last characters from a line start', () => {
    expect(tail('line 1\nline 2\nline 3\n', 10)).toBe('line 3\n');
    expect(tail('short', 10)).toBe('short');
  });
});

describe('errors', () => {
  it("carries the service's message and field", () => {
    const e = errorFrom(400, JSON.stringify({ status: 400, error: 'must be positive', field: 'gpus' }));
    expect([e.status, e.field, e.message]).toEqual([400, 'gpus', 'gpus: must be positive']);
    expect(errorFrom(403, JSON.stringify({ error: "team: you are not a member of team 'b'", field: 'team' })).message).toBe(
      "team: you are not a member of team 'b'"
    );
    expect(errorFrom(502, '<html>Bad Gateway</html>').message).toBe('HTTP 502: <html>Bad Gateway</html>');
  });

  it('finds the XSRF cookie', () => {
    expect(xsrfToken('a=1; _xsrf=2|abc%7C; b=3')).toBe('2|abc|');
    expect(xsrfToken('a=1')).toBe('');
  });
});

describe("a requeued job's attempts", () => {
  const preempted: IAttempt = {
    number: 0,
    state: 'preempted',
    reason: 'preempted by w9 (team nlp)',
    gpus: 2,
    borrowed: 2,
    placement: [],
    started_at: '2026-11-30T00:00:00Z',
    ended_at: '2026-11-30T00:02:05Z',
    exit_code: null
  };
  const w = job({ state: 'queued', attempt: 1, attempts: [preempted] });

  it('says how each attempt ended', () => {
    expect(attemptLine(preempted)).toBe('attempt 1: preempted after 2m 05s (preempted by w9 (team nlp))');
    const running: IAttempt = { ...preempted, number: 1, state: 'running', reason: '', ended_at: null };
    expect(attemptLine(running, Date.parse('2026-11-30T00:00:42Z'))).toBe('attempt 2: running for 42s');
  });

  it("puts each attempt's log under a line that names it", () => {
    expect(attemptHeader(w, 0)).toBe('── attempt 1: preempted after 2m 05s (preempted by w9 (team nlp)) ──\n');
    expect(attemptHeader(w, 1)).toBe('── attempt 2 ──\n');
    expect(joinLog('', attemptHeader(w, 0), 'step 1\nstep 2')).toBe(`${attemptHeader(w, 0)}step 1\nstep 2`);
    // a log cut mid-line still gets the next header on a line of its own
    expect(joinLog('step 1\nstep 2', attemptHeader(w, 1), 'resumed\n')).toBe('step 1\nstep 2\n── attempt 2 ──\nresumed\n');
  });
});

describe('times and dependencies', () => {
  const now = Date.parse('2026-11-30T12:00:00Z');
  it.each([
    ['2026-11-30T12:03:05Z', 'in 3m 05s'],
    ['2026-11-30T11:59:20Z', '40s ago'],
    ['2026-11-30T14:00:00Z', 'in 2h 00m'],
    ['2026-11-30T12:00:00Z', 'now']
  ])('%s is %s', (iso, text) => {
    expect(relativeTime(iso, now)).toBe(text);
  });

  it('says what a waiting job waits for, and counts it active (it can be cancelled)', () => {
    const waiting = job({ state: 'waiting', reason: 'waiting for w1 (ok)', after: [{ id: 'w1', condition: 'ok' }, { id: 's2', condition: 'any' }] });
    expect(afterText(waiting)).toBe('after w1 (ok), s2 (any)');
    expect(stateDetail(waiting)).toBe('waiting for w1 (ok)');
    expect(isActive(waiting)).toBe(true);
    expect(afterText(job())).toBe('');
  });
});

describe('GPU units and shares of one GPU', () => {
  it.each([
    [0.25, '0.25'],
    [0.0625, '0.0625'],
    [3.75, '3.75'],
    [2, '2'],
    [0, '0'],
    [NaN, '–'],
    [undefined, '–']
  ])('writes %p GPU units as %p', (units, text) => {
    expect(gpuUnits(units)).toBe(text);
  });

  it.each([
    [0.25, '1/4'],
    [0.5, '1/2'],
    [0.75, '3/4'],
    [0.375, '3/8'],
    [0.0625, '1/16']
  ])('writes a %p share as %p', (share, text) => {
    expect(shareFraction(share)).toBe(text);
  });

  it("says a job's share instead of its one GPU", () => {
    expect(gpusText(job({ gpus: 1, gpu_share: 0.25 }))).toBe('1/4 GPU');
    expect(gpusText(job({ gpus: 2, gpu_share: null }))).toBe('2');
  });
});
