import type { GpuHubApi } from '../src/api';
import { JobsModel } from '../src/model';
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
  jobs = async (scope: string) => {
    this.calls++;
    if (this.failing) {
      throw new Error('cannot reach the GPU Hub service');
    }
    const answer = scope === 'mine' ? this.mine : [...this.mine, job({ id: 'w2', user: 'bob' })];
    const gate = this.gate;
    if (gate) {
      await gate;
    }
    return answer;
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
