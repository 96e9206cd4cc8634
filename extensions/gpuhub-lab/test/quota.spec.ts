import { poolBreakdown, quotaView, requestFit, statusText, storageLine } from '../src/quota';
import { POOLS, TEAMS, teamDefaults } from './fixtures';

describe('the status bar text', () => {
  it('shows the pool where the team has most quota, with its GPU model', () => {
    expect(statusText(TEAMS, POOLS, 'vision')).toBe('vision: 6/8 A100');
  });

  it('is empty for a team it does not know, and says when there is no quota', () => {
    expect(statusText(TEAMS, POOLS, 'audio')).toBe('');
    expect(statusText([{ ...teamDefaults('x'), quotas: {} }], POOLS, 'x')).toBe('x: no quota');
  });

  it('breaks the team down per pool for the popover', () => {
    const rows = poolBreakdown(TEAMS, POOLS, 'vision');
    expect(rows.map(r => [r.pool, r.used, r.nominal, r.model])).toEqual([
      ['a100', 6, 8, 'A100'],
      ['t4', 0, 2, 'GPU']
    ]);
  });
});

describe('what the form says about a request', () => {
  const vision = quotaView(TEAMS, POOLS, 'vision', 'a100')!;

  it('knows the free quota', () => {
    expect(vision.free).toBe(2);
    expect(vision.poolFree).toBe(9);
    expect(quotaView(TEAMS, POOLS, 'vision', 'h100')).toBeNull();
  });

  it('fits within the free nominal quota', () => {
    expect(requestFit(vision, 2)).toMatchObject({ kind: 'fits', borrow: 0 });
  });

  it('borrows above nominal when the borrowing limit and the pool allow', () => {
    const fit = requestFit(vision, 4);
    expect(fit.kind).toBe('borrows');
    expect(fit.borrow).toBe(2);
    expect(fit.message).toContain('would borrow 2 GPUs');
    expect(fit.message).toContain('preempted');
  });

  it('waits when the team already holds what it may', () => {
    const full = { ...vision, used: 12, free: 0 };
    expect(requestFit(full, 2).kind).toBe('waits');
    const t4 = { ...quotaView(TEAMS, POOLS, 'vision', 't4')!, used: 2, free: 0 };
    expect(requestFit(t4, 1)).toMatchObject({ kind: 'waits', borrow: 0 });
  });

  it('waits rather than borrows when the pool has too few free GPUs', () => {
    expect(requestFit({ ...vision, poolFree: 3 }, 4).kind).toBe('waits');
  });

  it('refuses what the team can never hold', () => {
    const fit = requestFit(vision, 13);
    expect(fit.kind).toBe('over');
    expect(fit.message).toContain('(12)');
  });

  it('has no ceiling without a borrowing limit', () => {
    const nlp = quotaView(TEAMS, POOLS, 'nlp', 'a100')!;
    expect(requestFit(nlp, 9).kind).toBe('borrows');
    expect(requestFit(nlp, 100).kind).toBe('waits');
  });
});

describe('a team holding shares of GPUs', () => {
  // Three 1/4 shares of an H200: 0.75 GPU units of a nominal 2.
  const teams = [
    { ...teamDefaults('vision'), quotas: { h200: { nominal: 2, borrowing_limit: 1, lending_limit: null, used: 0.75 } } }
  ];
  const pools = [{ ...POOLS[0], name: 'h200', teams: { vision: 0.75 }, free: 3 }];

  it('shows fractional use in the status bar and the popover', () => {
    expect(statusText(teams, pools, 'vision')).toBe('vision: 0.75/2 A100');
    expect(poolBreakdown(teams, pools, 'vision').map(v => [v.used, v.free])).toEqual([[0.75, 1.25]]);
  });

  it('says the free quota and what a request borrows in GPU units', () => {
    const view = quotaView(teams, pools, 'vision', 'h200')!;
    expect(requestFit(view, 1).message).toBe("fits the team's free quota (1.25 of 2 free)");
    const fit = requestFit(view, 2);
    expect(fit.kind).toBe('borrows');
    expect(fit.borrow).toBe(0.75);
    expect(fit.message).toContain('would borrow 0.75 GPU above');
  });
});

describe("the team space's line in the popover", () => {
  const withSpace = (used: number, quota: number | null, state: 'ok' | 'warn' | 'full', datasets = 0) => [
    {
      ...teamDefaults('vision'),
      quotas: {},
      storage: {
        path: '/data/teams/vision',
        used_bytes: used,
        space_bytes: used - datasets,
        datasets_bytes: datasets,
        quota_bytes: quota,
        files: 10,
        measured_at: 1,
        state
      }
    }
  ];
  const GIB = 2 ** 30;

  it.each([
    [GIB, 2 * GIB, 'ok', 'team space: 1.0 GiB of 2.0 GiB (50 %)'],
    [1.9 * GIB, 2 * GIB, 'warn', 'team space: 1.9 GiB of 2.0 GiB (95 %): over 90 %'],
    [3 * GIB, 2 * GIB, 'full', 'team space: 3.0 GiB of 2.0 GiB (100 %): full, new jobs are refused until files are removed'],
    [512, null, 'ok', 'team space: 512 B (no storage quota)']
  ] as const)('says %s of %s (%s) as people read it', (used, quota, state, text) => {
    expect(storageLine(withSpace(used, quota, state), 'vision')?.text).toBe(text);
  });

  it("counts the team's datasets outside its space, and says how much of it they are", () => {
    expect(storageLine(withSpace(1.9 * GIB, 2 * GIB, 'warn', 1.5 * GIB), 'vision')?.text).toBe(
      'team space: 1.9 GiB (1.5 GiB in datasets) of 2.0 GiB (95 %): over 90 %'
    );
  });

  it('is absent for a team without a space', () => {
    expect(storageLine(TEAMS, 'vision')).toBeNull();
  });
});
