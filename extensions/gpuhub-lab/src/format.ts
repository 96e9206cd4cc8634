/** How jobs read in the panel: run times, states, reasons. Pure. */
import { IAttemptRow, IDependency, IWorkload } from './types';

export const ACTIVE_STATES = ['waiting', 'queued', 'running', 'stopping'];
export const FINISHED_STATES = ['succeeded', 'failed', 'cancelled', 'stopped'];

export function isActive(w: IWorkload): boolean {
  return ACTIVE_STATES.includes(w.state);
}

/**
 * GPU units as people read them: "0.25" for a 1/4 share, "3.75" for a team
 * holding three GPUs and three quarters, "2" for two GPUs (never "0" for a
 * share, nor "NaN" for a number the service left out).
 */
export function gpuUnits(units: number | null | undefined): string {
  if (typeof units !== 'number' || !Number.isFinite(units)) {
    return '–';
  }
  return Number.isInteger(units) ? String(units) : units.toFixed(4).replace(/0+$/, '');
}

/** A share of one GPU as a fraction: 0.25 -> "1/4", 0.75 -> "3/4" (slots are 1/2 to 1/16). */
export function shareFraction(share: number): string {
  for (let d = 2; d <= 64; d++) {
    const n = Math.round(share * d);
    if (Math.abs(n / d - share) < 1e-9) {
      return `${n}/${d}`;
    }
  }
  return gpuUnits(share);
}

/** A workload's GPUs: "1/4 GPU" for a share of one, else its count ("2"). */
export function gpusText(w: Pick<IWorkload, 'gpus' | 'gpu_share'>): string {
  return w.gpu_share ? `${shareFraction(w.gpu_share)} GPU` : String(w.gpus);
}

/** "1h 02m", "3m 05s", "42s". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  const pad = (n: number) => String(n).padStart(2, '0');
  if (h > 0) {
    return `${h}h ${pad(m)}m`;
  }
  if (m > 0) {
    return `${m}m ${pad(r)}s`;
  }
  return `${r}s`;
}

/** "in 3m 05s" for a time to come, "2m 10s ago" for one past. */
export function relativeTime(iso: string, now: number = Date.now()): string {
  const seconds = (Date.parse(iso) - now) / 1000;
  if (Math.abs(seconds) < 1) {
    return 'now';
  }
  return seconds > 0 ? `in ${duration(seconds)}` : `${duration(-seconds)} ago`;
}

/** "after w12 (ok), s3 (any)": what a job (or a sweep) waits for, or "" when nothing. */
export function afterText(w: { after?: IDependency[] }): string {
  const after = w.after ?? [];
  return after.length ? `after ${after.map(a => `${a.id} (${a.condition})`).join(', ')}` : '';
}

/** Run time of the current (or last) attempt, or "" while it never ran. */
export function runTime(w: IWorkload, now: number = Date.now()): string {
  if (!w.started_at) {
    return '';
  }
  const start = Date.parse(w.started_at);
  const end = w.finished_at && !isActive(w) ? Date.parse(w.finished_at) : now;
  return duration((end - start) / 1000);
}

/** What the panel says about a job's state: where it waits and why. */
export function stateDetail(w: IWorkload): string {
  if (w.state === 'queued') {
    let position = w.queue_position ? `#${w.queue_position} in queue` : 'queued';
    if (w.expected_start?.text) {
      position += ` · ${w.expected_start.text}`;
    }
    return w.reason ? `${position}: ${w.reason}` : position;
  }
  if (w.state === 'failed' && w.exit_code !== null && w.exit_code !== undefined) {
    return w.reason || `exit code ${w.exit_code}`;
  }
  return w.reason || '';
}

/** "attempt 2 (1 preempted)" when it was requeued, "" for a first attempt. */
export function attemptsText(w: IWorkload): string {
  if (!w.attempt) {
    return '';
  }
  const preempted = (w.attempts ?? []).filter(a => a.state === 'preempted').length;
  const extra = preempted ? ` (${preempted} preempted)` : '';
  return `attempt ${w.attempt + 1}${extra}`;
}

/**
 * Every attempt of a job, the current one too while it waits in the queue
 * again (the service lists an attempt once it is admitted).
 */
export function attemptList(w: IWorkload): IAttemptRow[] {
  const listed = w.attempts ?? [];
  if (listed.some(a => a.number === w.attempt)) {
    return listed;
  }
  const waiting: IAttemptRow = {
    number: w.attempt,
    state: w.state as IAttemptRow['state'],
    gpus: w.gpus,
    borrowed: 0,
    placement: [],
    started_at: null,
    ended_at: null,
    exit_code: null,
    reason: ''
  };
  return [...listed, waiting];
}

/** One attempt in a line: "attempt 1: preempted after 2m 05s (by w9 of team nlp)". */
export function attemptLine(a: IAttemptRow, now: number = Date.now()): string {
  let text = `attempt ${a.number + 1}: ${a.state}`;
  if (a.started_at) {
    const end = a.ended_at ? Date.parse(a.ended_at) : now;
    text += `${a.ended_at ? ' after' : ' for'} ${duration((end - Date.parse(a.started_at)) / 1000)}`;
  }
  return a.reason && a.reason !== a.state ? `${text} (${a.reason})` : text;
}

/**
 * The line over an attempt's part of a log: "── attempt 1: preempted after
 * 2m 05s (…) ──" for one that ended, "── attempt 2 ──" for the current one.
 */
export function attemptHeader(w: IWorkload | null, n: number): string {
  const a = w?.attempts?.find(x => x.number === n);
  return a?.ended_at ? `── ${attemptLine(a)} ──\n` : `── attempt ${n + 1} ──\n`;
}

/** Log text so far + a header + the next part, the header on a line of its own. */
export function joinLog(text: string, header: string, more: string): string {
  const sep = text === '' || text.endsWith('\n') ? '' : '\n';
  return text + sep + header + more;
}

/** The last `max` characters of `text`, cut at a line start. */
export function tail(text: string, max: number): string {
  if (text.length <= max) {
    return text;
  }
  const cut = text.slice(text.length - max);
  const nl = cut.indexOf('\n');
  return nl >= 0 && nl < cut.length - 1 ? cut.slice(nl + 1) : cut;
}
