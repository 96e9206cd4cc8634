import type { GpuHubApi } from '../src/api';
import { JOBS_PAGE, JobsModel } from '../src/model';
import { IJobNote } from '../src/transitions';
import { INotice, IWorkload } from '../src/types';
import { job, POOLS, TEAMS } from './fixtures';

/** The server extension's answers, changed by the test between polls. */
class FakeApi {
  mine: IWorkload[] = [];
  notices: INotice[] = [];
  failing = false;
  calls = 0;
  /** While set, answers (as of when they were asked) wait for it. */
  gate: Promise<void> | null = null;
  me = async () => ({ name: 'alice', teams: ['vision'], leads: [], admin: false, can_submit: true });
  limits: string[] = [];
  jobs = async (scope: string, limit: number) => {
    this.calls++;
    this.limits.push(`${scope} ${limit}`);
    if (this.failing) {
      throw new Error('cannot reach the GPU Hub service');
    }
    const all = scope === 'mine' ? this.mine : [...this.mine, job({ id: 'w2', user: 'bob' })];
    const gate = this.gate;
    if (gate) {
      await gate;
    }
    return { workloads: all.slice(0, limit), more: all.length > limit };
  };
  teams = async () => TEAMS;
  pools = async () => POOLS;
  noticesCall = async () => this.notices;
  workflowCalls: string[] = [];
  sweeps = async (scope: string) => {
    this.workflowCalls.push(`sweeps ${scope}`);
    return [{ id: 's1', name: 'lr', state: 'running' }];
  };
  sweep = async (id: string) => {
    this.workflowCalls.push(`sweep ${id}`);
    return { id, name: 'lr', state: 'running', tasks: [] };
  };
  schedules = async (scope: string) => {
    this.workflowCalls.push(`schedules ${scope}`);
    return [{ id: 'c1', name: 'nightly' }];
  };
}

function model(api: FakeApi): JobsModel {
  const fake = Object.assign(Object.create(null), api, { notices: api.noticesCall });
  const m = new JobsModel(fake as unknown as GpuHubApi, { activeInterval: 60, idleInterval: 60, maxInterval: 60 });
  models.push(m);
  return m;
}

let models: JobsModel[] = [];
afterEach(() => {
  models.forEach(m => m.dispose());
  models = [];
});

describe('the jobs model', () => {
  it('notifies my jobs as they move, and new culler notices once', async () => {
    const api = new FakeApi();
    api.mine = [job({ state: 'queued' })];
    const m = model(api);
    const notes: IJobNote[] = [];
    const notices: INotice[] = [];
    m.jobNotes.connect((_, n) => notes.push(...n));
    m.newNotices.connect((_, n) => notices.push(...n));
    m.start();
    await m.refreshNow();
    expect(m.mine.map(j => j.state)).toEqual(['queued']);
    expect(m.primaryTeam).toBe('vision');

    api.mine = [job({ state: 'running' })];
    api.notices = [{ id: 7, user: 'alice', server: '', kind: 'cull-warning', message: 'idle GPUs: culled in 15 minutes', created_at: '', expires_at: null, cleared_at: null, data: {} }];
    await m.refreshNow();
    api.mine = [job({ state: 'succeeded' })];
    await m.refreshNow();
    expect(notes.map(n => n.kind)).toEqual(['started', 'succeeded']);
    expect(notices.map(n => n.id)).toEqual([7]);
    m.dispose();
  });

  it('shows the error and keeps the last jobs when the service does not answer', async () => {
    const api = new FakeApi();
    api.mine = [job({ state: 'running' })];
    const m = model(api);
    m.start();
    await m.refreshNow();
    api.failing = true;
    await m.refreshNow();
    expect(m.error).toContain('cannot reach');
    expect(m.mine).toHaveLength(1);
    api.failing = false;
    await m.refreshNow();
    expect(m.error).toBe('');
    m.dispose();
  });

  it("lists the team's jobs only when asked", async () => {
    const api = new FakeApi();
    api.mine = [job()];
    const m = model(api);
    m.start();
    await m.refreshNow();
    expect(m.team).toEqual([]);
    m.setScope('team');
    await m.refreshNow();
    expect(m.team.map(j => j.user)).toEqual(['alice', 'bob']);
    m.dispose();
  });

  it('lists a page of jobs, a page more at each "Show more", and polls for what it shows', async () => {
    const api = new FakeApi();
    api.mine = Array.from({ length: 120 }, (_, k) => job({ id: `w${k}` }));
    const m = model(api);
    m.start();
    await m.refreshNow();
    expect([m.mine.length, m.more.mine]).toEqual([JOBS_PAGE, true]);
    m.showMore();
    await m.refreshNow();
    expect([m.mine.length, m.more.mine]).toEqual([2 * JOBS_PAGE, true]);
    m.showMore();
    await m.refreshNow();
    expect([m.mine.length, m.more.mine]).toEqual([120, false]);
    // the team's scope keeps its own page
    m.setScope('team');
    await m.refreshNow();
    expect([m.team.length, m.more.team]).toEqual([JOBS_PAGE, true]);
    expect(api.limits.slice(-2)).toEqual([`mine ${3 * JOBS_PAGE}`, `team ${JOBS_PAGE}`]);
    m.dispose();
  });

  // A poll asked before the submit answers after it (a loaded server): the
  // new job stays listed, and a poll after the submit runs.
  it.each([
    [
      'the first poll',
      2,
      async (m: JobsModel, hold: () => void) => {
        hold();
        m.start();
      }
    ],
    [
      'a refresh',
      3,
      async (m: JobsModel, hold: () => void) => {
        m.start();
        await m.refreshNow();
        hold();
        return m.refreshNow();
      }
    ]
  ])('keeps a job just submitted when %s, asked before, answers after it', async (_, calls, poll) => {
    const api = new FakeApi();
    const m = model(api);
    let release = () => {};
    const early = poll(m, () => (api.gate = new Promise<void>(r => (release = r))));
    await new Promise(r => setTimeout(r, 20)); // its jobs() asked, its answer held
    const submitted = job({ id: 'w9', state: 'queued' });
    api.mine = [submitted];
    api.gate = null;
    m.add(submitted);
    expect(m.mine.map(j => j.id)).toEqual(['w9']);
    const after = m.refreshNow();
    await new Promise(r => setTimeout(r, 20)); // a poll not waiting for it has answered by now
    release();
    await Promise.all([early, after]);
    await new Promise(r => setTimeout(r, 20)); // the held answer is in
    expect(m.mine.map(j => j.id)).toEqual(['w9']);
    expect(api.calls).toBe(calls);
  });

  it('asks for sweeps, schedules and opened sweeps only while the panel is shown', async () => {
    const api = new FakeApi();
    const m = model(api);
    let shown = false;
    m.shown = () => shown;
    m.start();
    await m.refreshNow();
    expect(api.workflowCalls).toEqual([]);
    shown = true;
    await m.refreshNow();
    expect(api.workflowCalls).toEqual(['sweeps mine', 'schedules mine']);
    expect(m.sweeps.map(s => s.id)).toEqual(['s1']);
    expect(m.schedules.map(s => s.id)).toEqual(['c1']);
    api.workflowCalls = [];
    m.toggleSweep('s1');
    await m.refreshNow();
    expect(api.workflowCalls).toContain('sweep s1');
    expect(m.details.get('s1')?.tasks).toEqual([]);
    expect(m.recentTargets().map(t => t.id)).toEqual(['s1']);
    shown = false;
    api.workflowCalls = [];
    await m.refreshNow();
    expect(api.workflowCalls).toEqual([]);
    expect(m.sweeps.map(s => s.id)).toEqual(['s1']); // kept while hidden
  });
});
