/**
 * Sweeps as the Sweep tab and the Jobs panel see them: the grid typed from
 * what the user writes, how many tasks it makes, a sweep's tasks grouped
 * under one row, and its progress bar's segments. Pure.
 */
import { assignmentLines, FormError, parseValue } from './submission';
import { IParameter, ISweep, ISweepCounts, IWorkload } from './types';

/** A value the Sweep tab cannot read; `param` names the parameter's row. */
export class GridError extends Error {
  constructor(
    readonly param: string,
    message: string
  ) {
    super(message);
  }
}

/** The most tasks one sweep may have (the service's limit). */
export const MAX_TASKS = 10000;

function typed(param: string, text: string, type: string): unknown {
  const t = text.trim();
  switch (type) {
    case 'int': {
      if (!/^[-+]?\d+$/.test(t)) {
        throw new GridError(param, `${param}: "${t}" is not a whole number (the default is one)`);
      }
      return Number(t);
    }
    case 'float': {
      const n = Number(t);
      if (t === '' || !Number.isFinite(n)) {
        throw new GridError(param, `${param}: "${t}" is not a number (the default is one)`);
      }
      return n;
    }
    case 'bool': {
      const v = t.toLowerCase();
      if (v !== 'true' && v !== 'false') {
        throw new GridError(param, `${param}: "${t}" is not True or False (the default is one)`);
      }
      return v === 'true';
    }
    case 'str':
      return t.replace(/^(['"])(.*)\1$/, '$2');
    default:
      // lists, dicts, None, expressions: JSON or a Python literal, else text
      return parseValue(t);
  }
}

/**
 * A parameter's values as typed in the Sweep tab: comma-separated, each
 * read as the default's type ("0.1, 0.01" for a float: [0.1, 0.01]); a
 * JSON array as it is (for values with commas in them). Empty: [] (the
 * parameter is not swept).
 */
export function parseValueList(param: string, text: string, type: string): unknown[] {
  const t = text.trim();
  if (!t) {
    return [];
  }
  if (t.startsWith('[') && type !== 'list') {
    try {
      const list = JSON.parse(t);
      if (Array.isArray(list)) {
        return list;
      }
    } catch {
      // not JSON: comma-separated below
    }
  }
  const parts = type === 'list' || type === 'dict' ? splitTopLevel(t) : t.split(',');
  const values = parts.map(p => p.trim());
  if (values.some(v => v === '')) {
    throw new GridError(param, `${param}: an empty value between commas`);
  }
  return values.map(v => typed(param, v, type));
}

/** "[1, 2], [3]" → ["[1, 2]", "[3]"]: commas outside brackets. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '[' || c === '{' || c === '(') {
      depth++;
    } else if (c === ']' || c === '}' || c === ')') {
      depth--;
    } else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts;
}

/**
 * The grid of a sweep: each parameter with values written, in the
 * notebook's order. `values` maps names to what the user typed; names
 * not of the notebook (a script's) are read as JSON or text.
 */
export function gridFrom(params: IParameter[], values: Record<string, string>): Record<string, unknown[]> {
  const types = new Map(params.map(p => [p.name, p.type ?? 'expr']));
  const names = [...params.map(p => p.name), ...Object.keys(values).filter(n => !types.has(n))];
  const grid: Record<string, unknown[]> = {};
  for (const name of names) {
    const list = parseValueList(name, values[name] ?? '', types.get(name) ?? 'expr');
    if (list.length) {
      grid[name] = list;
    }
  }
  return grid;
}

/** "name = v1, v2" lines (a script's parameters, which no cell declares). */
export function parseGridLines(text: string): Record<string, string> {
  return assignmentLines(text, (n, line) => new FormError('sweepLines', `line ${n}: write name = value, value, not "${line}"`));
}

/** How many tasks a grid makes: the product of its lists' lengths (0 without any). */
export function taskCount(grid: Record<string, unknown[]>): number {
  const lists = Object.values(grid);
  return lists.length ? lists.reduce((n, l) => n * l.length, 1) : 0;
}

/** A row of the Jobs panel: a job on its own, or a sweep with its tasks under it. */
export type PanelItem =
  | { kind: 'job'; job: IWorkload }
  | { kind: 'sweep'; id: string; sweep: ISweep | null; tasks: IWorkload[] };

function submitted(item: PanelItem): string {
  if (item.kind === 'job') {
    return item.job.submitted_at;
  }
  return item.sweep?.submitted_at ?? item.tasks.reduce((t, w) => (w.submitted_at < t ? w.submitted_at : t), '9');
}

/**
 * The panel's rows, newest first: jobs that belong to no sweep, and one
 * row per sweep (those the service listed, and any whose tasks are listed
 * before the sweep is), its tasks in index order.
 */
export function groupBySweep(jobs: IWorkload[], sweeps: ISweep[]): PanelItem[] {
  const groups = new Map<string, PanelItem & { kind: 'sweep' }>();
  for (const s of sweeps) {
    groups.set(s.id, { kind: 'sweep', id: s.id, sweep: s, tasks: [] });
  }
  const items: PanelItem[] = [];
  for (const job of jobs) {
    if (!job.sweep_id) {
      items.push({ kind: 'job', job });
      continue;
    }
    let group = groups.get(job.sweep_id);
    if (!group) {
      group = { kind: 'sweep', id: job.sweep_id, sweep: null, tasks: [] };
      groups.set(job.sweep_id, group);
    }
    group.tasks.push(job);
  }
  for (const group of groups.values()) {
    group.tasks.sort((a, b) => (a.sweep_index ?? 0) - (b.sweep_index ?? 0));
    items.push(group);
  }
  // ISO timestamps sort as text; ties keep the order above.
  return items
    .map((item, i) => ({ item, i }))
    .sort((a, b) => (submitted(a.item) === submitted(b.item) ? a.i - b.i : submitted(a.item) < submitted(b.item) ? 1 : -1))
    .map(x => x.item);
}

export type SegmentKind = 'succeeded' | 'failed' | 'running' | 'queued';

export interface ISegment {
  kind: SegmentKind;
  count: number;
  /** Share of the bar, 0-100. */
  percent: number;
}

/** Which of a sweep's counts each segment of its bar adds up. */
const SEGMENT_STATES: Record<SegmentKind, (keyof ISweepCounts)[]> = {
  succeeded: ['succeeded'],
  failed: ['failed', 'cancelled', 'stopped'],
  running: ['running', 'stopping'],
  queued: ['queued', 'held', 'waiting']
};

/** The progress bar of a sweep: succeeded, failed (and cancelled), running, queued (and held, waiting). */
export function progressSegments(counts: Partial<ISweepCounts>, total: number): ISegment[] {
  const kinds = Object.keys(SEGMENT_STATES) as SegmentKind[];
  return kinds.map(kind => {
    const count = SEGMENT_STATES[kind].reduce((n, s) => n + (counts[s] ?? 0), 0);
    return { kind, count, percent: total > 0 ? (100 * count) / total : 0 };
  });
}

/** Counts of a sweep from the tasks listed, for a sweep the service has not listed yet. */
export function countTasks(tasks: IWorkload[]): Partial<ISweepCounts> {
  const counts: Partial<ISweepCounts> = {};
  for (const t of tasks) {
    const key = t.state as keyof ISweepCounts;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** "3/4 done · 1 failed" under a sweep's name (the bar's red is failed and cancelled). */
export function progressText(counts: Partial<ISweepCounts>, total: number): string {
  const [succeeded, ended, running, queued] = progressSegments(counts, total);
  const failed = counts.failed ?? 0;
  const parts = [`${succeeded.count + ended.count}/${total} done`];
  if (failed) {
    parts.push(`${failed} failed`);
  }
  if (ended.count > failed) {
    parts.push(`${ended.count - failed} cancelled`);
  }
  if (running.count) {
    parts.push(`${running.count} running`);
  }
  if (queued.count) {
    parts.push(`${queued.count} waiting`);
  }
  return parts.join(' · ');
}

/** Whether a sweep has tasks to retry (failed or cancelled ones). */
export function hasRetryable(counts: Partial<ISweepCounts>): boolean {
  return (counts.failed ?? 0) + (counts.cancelled ?? 0) > 0;
}
