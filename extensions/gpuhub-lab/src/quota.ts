/**
 * A team's quota in a pool, as the submit form and the status bar show it.
 * Pure: computed from /teams and /pools answers.
 */
import { gpuUnits } from './format';
import { IPool, ITeam } from './types';

export interface IQuotaView {
  team: string;
  pool: string;
  nominal: number;
  /** GPU units the team holds (a 1/4 share counts 0.25). */
  used: number;
  /** GPUs left in the team's nominal (guaranteed) quota. */
  free: number;
  /** Most GPUs the team may hold above nominal (null: no limit). */
  borrowingLimit: number | null;
  poolFree: number;
  model: string;
}

export interface IRequestFit {
  /**
   * fits: within the team's free nominal quota; borrows: starts now above
   * nominal (preemptible); waits: queues until the team's use drops; over:
   * above nominal + borrowing limit, it can never start.
   */
  kind: 'fits' | 'borrows' | 'waits' | 'over';
  /** GPUs it would hold above the team's nominal quota. */
  borrow: number;
  message: string;
}

/** The GPU model of a pool ("A100"), from its nodes' devices. */
export function poolModel(pool: IPool | undefined): string {
  for (const node of pool?.nodes ?? []) {
    for (const device of node.devices ?? []) {
      if (device.model) {
        return device.model;
      }
    }
  }
  return 'GPU';
}

export function quotaView(
  teams: ITeam[],
  pools: IPool[],
  team: string,
  pool: string
): IQuotaView | null {
  const t = teams.find(x => x.name === team);
  const q = t?.quotas[pool];
  if (!q) {
    return null;
  }
  const p = pools.find(x => x.name === pool);
  return {
    team,
    pool,
    nominal: q.nominal,
    used: q.used,
    free: Math.max(0, q.nominal - q.used),
    borrowingLimit: q.borrowing_limit,
    poolFree: p?.free ?? 0,
    model: poolModel(p)
  };
}

/**
 * Whether a request of `gpus` fits the team's free quota, would start on
 * borrowed GPUs (preemptible), or has to wait for the team's own use to drop.
 */
export function requestFit(view: IQuotaView, gpus: number): IRequestFit {
  const limit = view.borrowingLimit === null ? Infinity : view.nominal + view.borrowingLimit;
  const borrow = Math.max(0, view.used + gpus - Math.max(view.nominal, view.used));
  const free = `${gpuUnits(view.free)} of ${view.nominal} free`;
  if (gpus > limit) {
    const message = `${gpus} GPUs is more than team ${view.team} may ever hold in ${view.pool} (${limit})`;
    return { kind: 'over', borrow: 0, message };
  }
  if (view.used + gpus <= view.nominal) {
    return { kind: 'fits', borrow: 0, message: `fits the team's free quota (${free})` };
  }
  if (view.used + gpus <= limit && gpus <= view.poolFree) {
    const message =
      `would borrow ${gpuUnits(borrow)} GPU${borrow > 0 && borrow <= 1 ? '' : 's'} above the team's quota (${free}): ` +
      'it may be preempted when the lender needs them';
    return { kind: 'borrows', borrow, message };
  }
  return { kind: 'waits', borrow: 0, message: `waits for the team's own quota (${free})` };
}

/** "vision: 6/8 A100" for the status bar: the pool where the team has most quota. */
export function statusText(teams: ITeam[], pools: IPool[], team: string): string {
  const t = teams.find(x => x.name === team);
  if (!t) {
    return '';
  }
  const names = Object.keys(t.quotas).sort(
    (a, b) => t.quotas[b].nominal - t.quotas[a].nominal || a.localeCompare(b)
  );
  if (names.length === 0) {
    return `${team}: no quota`;
  }
  const view = quotaView(teams, pools, team, names[0])!;
  return `${team}: ${gpuUnits(view.used)}/${view.nominal} ${view.model}`;
}

/** One row per pool of the team, for the status bar's popover. */
export function poolBreakdown(teams: ITeam[], pools: IPool[], team: string): IQuotaView[] {
  const t = teams.find(x => x.name === team);
  return Object.keys(t?.quotas ?? {})
    .sort()
    .map(pool => quotaView(teams, pools, team, pool)!);
}

export interface IStorageLine {
  text: string;
  state: 'ok' | 'warn' | 'full';
  percent: number | null;
}

function bytesText(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

/** The team's space (and its datasets outside it) against its storage quota
 * (docs/storage.md); null without a space. */
export function storageLine(teams: ITeam[], team: string): IStorageLine | null {
  const storage = teams.find(x => x.name === team)?.storage;
  if (!storage) {
    return null;
  }
  const used =
    bytesText(storage.used_bytes) +
    (storage.datasets_bytes ? ` (${bytesText(storage.datasets_bytes)} in datasets)` : '');
  if (!storage.quota_bytes) {
    return { text: `team space: ${used} (no storage quota)`, state: 'ok', percent: null };
  }
  const percent = Math.min(100, Math.floor((100 * storage.used_bytes) / storage.quota_bytes));
  const why =
    storage.state === 'full'
      ? ': full, new jobs are refused until files are removed'
      : storage.state === 'warn'
        ? ': over 90 %'
        : '';
  return {
    text: `team space: ${used} of ${bytesText(storage.quota_bytes)} (${percent} %)${why}`,
    state: storage.state,
    percent
  };
}
