/**
 * A team's quota in a pool, as the submit form and the status bar show it.
 * Pure: computed from /teams and /pools answers.
 */
import { IPool, ITeam } from './types';

export interface IQuotaView {
  team: string;
  pool: string;
  nominal: number;
  used: number;
  /** GPUs left in the team's nominal (guaranteed) quota. */
  free: number;
  /** Most GPUs the team may hold above nominal (null: no limit). */
  borrowingLimit: number | null;
  poolFree: number;
  model: string;
}

export interface IRequestFit {
  /** GPUs of the request above what is free in the team's quota. */
  borrow: number;
  /** The request is above nominal + borrowing limit: it can never start. */
  overLimit: boolean;
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

/** Whether a request of `gpus` fits the team's free quota or would borrow. */
export function requestFit(view: IQuotaView, gpus: number): IRequestFit {
  const borrow = Math.max(0, gpus - view.free);
  const limit = view.borrowingLimit === null ? Infinity : view.nominal + view.borrowingLimit;
  const overLimit = gpus > limit;
  let message: string;
  if (overLimit) {
    message = `${gpus} GPUs is more than team ${view.team} may ever hold in ${view.pool} (${limit})`;
  } else if (borrow === 0) {
    message = `fits the team's free quota (${view.free} of ${view.nominal} free)`;
  } else if (view.used + gpus <= view.nominal) {
    message = `waits for the team's own quota (${view.free} of ${view.nominal} free)`;
  } else {
    message =
      `would borrow ${borrow} GPU${borrow === 1 ? '' : 's'} above the team's quota ` +
      `(${view.free} of ${view.nominal} free): it may be preempted when the lender needs them`;
  }
  return { borrow, overLimit, message };
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
  return `${team}: ${view.used}/${view.nominal} ${view.model}`;
}

/** One row per pool of the team, for the status bar's popover. */
export function poolBreakdown(teams: ITeam[], pools: IPool[], team: string): IQuotaView[] {
  const t = teams.find(x => x.name === team);
  return Object.keys(t?.quotas ?? {})
    .sort()
    .map(pool => quotaView(teams, pools, team, pool)!);
}
