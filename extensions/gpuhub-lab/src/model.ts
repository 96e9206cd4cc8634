/**
 * The live state the panel, the status bar and the notifications share: my
 * jobs, my team's jobs, quotas and notices, refreshed by one poll that is
 * fast while a job of mine moves, slow when nothing does, backs off on
 * errors and stands by while the page is hidden.
 */
import { ISignal, Signal } from '@lumino/signaling';

import type { GpuHubApi, IJobsPage, JobScope } from './api';
import { PolledModel } from './polled';
import { IJobNote, IJobSnapshot, jobNotes, pollInterval, snapshot } from './transitions';
import { IMe, INotice, IPool, ISchedule, ISweep, ITeam, IWorkload } from './types';

export interface IPollSettings {
  /** Seconds between polls while a job of mine is queued or running. */
  activeInterval: number;
  /** Seconds between polls when none is. */
  idleInterval: number;
  /** Longest wait after failures (backoff). */
  maxInterval: number;
}

/** Jobs the panel lists at first, and the more each "Show more" adds. */
export const JOBS_PAGE = 50;

export class JobsModel extends PolledModel {
  constructor(
    readonly api: GpuHubApi,
    private pollSettings: IPollSettings
  ) {
    super({
      name: 'gpuhub-lab:jobs',
      interval: pollSettings.idleInterval,
      maxInterval: pollSettings.maxInterval,
      standby: 'when-hidden'
    });
  }

  me: IMe | null = null;
  mine: IWorkload[] = [];
  team: IWorkload[] = [];
  teams: ITeam[] = [];
  pools: IPool[] = [];
  error = '';
  scope: JobScope = 'mine';
  /** How many jobs of each scope are listed (a poll asks for that many). */
  readonly limits: Record<JobScope, number> = { mine: JOBS_PAGE, team: JOBS_PAGE };
  /** Whether each scope has older jobs than those listed. */
  readonly more: Record<JobScope, boolean> = { mine: false, team: false };
  /** Sweeps and schedules of the scope: fetched only while the Jobs panel is shown. */
  sweeps: ISweep[] = [];
  schedules: ISchedule[] = [];
  /** Sweeps opened in the panel, with their tasks (fetched with each poll while shown). */
  readonly expanded = new Set<string>();
  details = new Map<string, ISweep>();
  /** Whether the Jobs panel is shown (set by the plugin). */
  shown: () => boolean = () => false;

  /** Jobs of mine that changed state since the last poll. */
  get jobNotes(): ISignal<this, IJobNote[]> {
    return this._jobNotes;
  }

  /** Notices (the culler's warnings) not seen before. */
  get newNotices(): ISignal<this, INotice[]> {
    return this._newNotices;
  }

  /** The team the status bar and the form start with. */
  get primaryTeam(): string {
    return this.me?.teams[0] ?? this.teams[0]?.name ?? '';
  }

  configure(settings: IPollSettings): void {
    this.pollSettings = settings;
    this.maxInterval = settings.maxInterval;
  }

  setScope(scope: JobScope): void {
    this.scope = scope;
    this._changed.emit();
    void this.refreshNow();
  }

  /** List a page more of the scope's older jobs. */
  showMore(): void {
    this.limits[this.scope] += JOBS_PAGE;
    void this.refreshNow();
  }

  /** Open or close a sweep's results in the panel. */
  toggleSweep(id: string): void {
    if (!this.expanded.delete(id)) {
      this.expanded.add(id);
    }
    this._changed.emit();
    void this.refreshNow();
  }

  /** What a new job may run after: my recent sweeps and jobs. */
  recentTargets(): { id: string; label: string }[] {
    return [
      ...this.sweeps.slice(0, 10).map(s => ({ id: s.id, label: `sweep ${s.name} (${s.id}, ${s.state})` })),
      ...this.mine.slice(0, 20).map(j => ({ id: j.id, label: `${j.name} (${j.id}, ${j.state})` }))
    ];
  }

  /**
   * A job just submitted, listed at once from the submit's answer (the next
   * poll brings its queue position). A poll already under way began before
   * the job existed: its answer is dropped rather than dropping the job.
   */
  add(job: IWorkload): void {
    this.generation++;
    const without = (jobs: IWorkload[]) => jobs.filter(j => j.id !== job.id);
    this.mine = [job, ...without(this.mine)];
    if (this.scope === 'team') {
      this.team = [job, ...without(this.team)];
    }
    this.seen?.set(job.id, snapshot([job]).get(job.id)!);
    this._changed.emit();
  }

  protected async refresh(): Promise<void> {
    // Polls may overlap (refreshNow while one is under way): only the
    // latest one's answer is shown, whatever order the answers come in.
    const generation = ++this.generation;
    try {
      if (!this.me) {
        this.me = await this.api.me();
      }
      const shown = this.shown();
      const kept: IJobsPage = { workloads: this.team, more: this.more.team };
      const [minePage, teamPage, teams, pools, notices, workflows] = await Promise.all([
        this.api.jobs('mine', this.limits.mine),
        this.scope === 'team' ? this.api.jobs('team', this.limits.team) : Promise.resolve(kept),
        this.api.teams(),
        this.api.pools(),
        this.api.notices(),
        shown ? this.workflows() : Promise.resolve(null)
      ]);
      if (generation !== this.generation) {
        return;
      }
      const [mine, team] = [minePage.workloads, teamPage.workloads];
      Object.assign(this.more, { mine: minePage.more, team: teamPage.more });
      const notes = jobNotes(this.seen, mine);
      this.seen = snapshot(mine);
      Object.assign(this, { mine, team, teams, pools, error: '', ...workflows });
      const fresh = notices.filter(n => !this.noticesSeen.has(n.id));
      fresh.forEach(n => this.noticesSeen.add(n.id));
      this._changed.emit();
      if (notes.length) {
        this._jobNotes.emit(notes);
      }
      if (fresh.length) {
        this._newNotices.emit(fresh);
      }
      // A sweep's tasks are not in `mine`: a running sweep polls fast too.
      const moving = this.sweeps.some(s => s.state === 'running');
      const next = moving
        ? this.pollSettings.activeInterval
        : pollInterval(mine, this.pollSettings.activeInterval, this.pollSettings.idleInterval, notes.length > 0);
      this.setInterval(next);
    } catch (error) {
      if (generation !== this.generation) {
        return;
      }
      this.error = String((error as Error).message ?? error);
      this._changed.emit();
      throw error; // the poll backs off
    }
  }

  /** Sweeps, schedules and the opened sweeps' tasks. */
  private async workflows(): Promise<Pick<JobsModel, 'sweeps' | 'schedules' | 'details'>> {
    const opened = Array.from(this.expanded);
    const [sweeps, schedules, details] = await Promise.all([
      this.api.sweeps(this.scope),
      this.api.schedules(this.scope),
      Promise.all(opened.map(id => this.api.sweep(id)))
    ]);
    return { sweeps, schedules, details: new Map(details.map(d => [d.id, d])) };
  }

  private generation = 0;
  private seen: Map<string, IJobSnapshot> | null = null;
  private noticesSeen = new Set<number>();
  private _jobNotes = new Signal<this, IJobNote[]>(this);
  private _newNotices = new Signal<this, INotice[]>(this);
}
