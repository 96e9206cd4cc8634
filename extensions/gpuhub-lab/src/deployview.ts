/**
 * How a deployment reads in the Deployments panel: its traffic bar, which
 * actions apply, what its numbers say, and the dialogs' parsing. Pure.
 */
import { IDeployment, IRevision } from './types';

export type RevisionRole = 'stable' | 'canary' | 'idle' | 'other';

export function revisionRole(d: IDeployment, revision: number): RevisionRole {
  if (revision === d.canary_revision) {
    return 'canary';
  }
  if (revision === d.stable_revision) {
    return 'stable';
  }
  return d.traffic[String(revision)] ? 'other' : 'idle';
}

export interface ITrafficSegment {
  revision: number;
  percent: number;
  /** Percent of the bar left of this segment. */
  offset: number;
  role: RevisionRole;
}

/** The traffic split as the bar draws it: revisions with traffic, oldest first. */
export function trafficSegments(d: IDeployment): ITrafficSegment[] {
  let offset = 0;
  return Object.entries(d.traffic)
    .map(([rev, percent]) => ({ revision: Number(rev), percent }))
    .filter(s => s.percent > 0)
    .sort((a, b) => a.revision - b.revision)
    .map(s => {
      const segment = { ...s, offset, role: revisionRole(d, s.revision) };
      offset += s.percent;
      return segment;
    });
}

export type DeploymentAction = 'promote' | 'rollback' | 'traffic' | 'scale' | 'delete';

export interface IActionState {
  action: DeploymentAction;
  enabled: boolean;
  /** What it does now, or why it does not apply. */
  title: string;
}

/** The actions of a deployment's card, each with why it is (not) available. */
export function actionStates(d: IDeployment): IActionState[] {
  // Only deployed revisions take traffic: waiting, failed and cancelled ones never did.
  const numbers = d.revisions.filter(r => (r.state ?? 'ready') === 'ready').map(r => r.number);
  const earlier = numbers.filter(n => n < d.stable_revision);
  const canary = d.canary_revision;
  const rollbackTo = canary !== null ? d.stable_revision : earlier.length ? Math.max(...earlier) : null;
  return [
    {
      action: 'promote',
      enabled: canary !== null,
      title: canary !== null ? `Give revision ${canary} all traffic` : 'No canary to promote'
    },
    {
      action: 'rollback',
      enabled: rollbackTo !== null,
      title: rollbackTo !== null ? `Send all traffic back to revision ${rollbackTo}` : 'No earlier revision'
    },
    {
      action: 'traffic',
      enabled: numbers.length > 1,
      title: numbers.length > 1 ? 'Split the traffic between revisions' : 'Only one revision'
    },
    { action: 'scale', enabled: true, title: 'Set the minimum and maximum replicas' },
    { action: 'delete', enabled: true, title: 'Stop every replica and delete the deployment' }
  ];
}

export type RevisionPhase = 'waiting' | 'rolling out' | 'serving' | 'idle' | 'failed' | 'cancelled';

export interface IRevisionStatus {
  phase: RevisionPhase;
  /** The phase in words, with the service's reason where it gives one. */
  text: string;
}

/**
 * Where a revision stands: waiting for its `after` (with what it waits
 * for), rolling out (it has traffic but no ready replica yet), serving,
 * idle (deployed, no traffic), failed or cancelled (never deployed: why).
 */
export function revisionStatus(d: IDeployment, r: IRevision): IRevisionStatus {
  const reason = r.reason?.trim() ?? '';
  switch (r.state) {
    case 'waiting':
      // The service's reason says it already ("waiting for w1a2b3c4d5e6 (ok)").
      return { phase: 'waiting', text: !reason ? 'waiting' : reason.startsWith('waiting') ? reason : `waiting: ${reason}` };
    case 'failed':
      return { phase: 'failed', text: `failed: ${reason || 'no reason given'}` };
    case 'cancelled':
      return { phase: 'cancelled', text: reason || 'cancelled' };
  }
  if (!d.traffic[String(r.number)]) {
    return { phase: 'idle', text: r.replicas.length ? 'no traffic (replicas stopping)' : 'no traffic' };
  }
  if (r.ready_replicas > 0 || (d.min_replicas === 0 && r.replicas.length === 0)) {
    return { phase: 'serving', text: r.ready_replicas > 0 ? 'serving' : 'serving (no replica while idle)' };
  }
  return { phase: 'rolling out', text: `rolling out: ${r.ready_replicas}/${r.replicas.length} replicas ready` };
}

/**
 * The revisions a card lists, newest first: those with traffic or replicas,
 * every waiting one, and the newest if it failed or was cancelled (so one
 * sees why it never served).
 */
export function listedRevisions(d: IDeployment): IRevision[] {
  const newest = Math.max(...d.revisions.map(r => r.number));
  return d.revisions
    .filter(
      r =>
        d.traffic[String(r.number)] ||
        r.replicas.length ||
        r.state === 'waiting' ||
        (r.number === newest && (r.state === 'failed' || r.state === 'cancelled'))
    )
    .sort((a, b) => b.number - a.number);
}

/** "1/2" ready of running replicas. */
export function replicasText(r: IRevision): string {
  return `${r.ready_replicas}/${r.replicas.length}`;
}

/** "12 ms", "1.2 s", "–" for no measurement. */
export function latencyText(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) {
    return '–';
  }
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
}

/** "0 %", "2.5 %". */
export function percentText(rate: number | null | undefined): string {
  if (rate === null || rate === undefined) {
    return '–';
  }
  const p = rate * 100;
  return `${p === 0 || p >= 10 ? Math.round(p) : p.toFixed(1)} %`;
}

/** "0.35/s". */
export function rpsText(rps: number): string {
  return `${rps >= 10 ? Math.round(rps) : rps.toFixed(2)}/s`;
}

/** Whether any revision that gets traffic waits for a ready replica (the panel polls faster). */
export function isStarting(d: IDeployment): boolean {
  return d.revisions.some(r => d.traffic[String(r.number)] && r.ready_replicas === 0);
}

export class DialogError extends Error {}

/** The traffic dialog's "revision → percent" texts as the service's traffic object. */
export function parseTraffic(texts: Record<string, string>): Record<string, number> {
  const traffic: Record<string, number> = {};
  for (const [rev, text] of Object.entries(texts)) {
    const n = Number(text.trim() || '0');
    if (!Number.isInteger(n) || n < 0 || n > 100) {
      throw new DialogError(`revision ${rev}: a whole percent from 0 to 100, not "${text}"`);
    }
    traffic[rev] = n;
  }
  const total = Object.values(traffic).reduce((a, b) => a + b, 0);
  if (total !== 100) {
    throw new DialogError(`the percents add up to ${total}, not 100`);
  }
  return traffic;
}

export interface IScaleRequest {
  min_replicas: number;
  max_replicas: number;
  scale_to_zero_after?: number;
}

/** The scale dialog's texts as the service's scale body (the idle time only for min 0). */
export function parseScale(min: string, max: string, idle = ''): IScaleRequest {
  const lo = Number(min.trim());
  const hi = Number(max.trim());
  if (!min.trim() || !Number.isInteger(lo) || lo < 0 || lo > 64) {
    throw new DialogError(`minimum: a whole number from 0 to 64, not "${min}"`);
  }
  if (!max.trim() || !Number.isInteger(hi) || hi < 1 || hi > 64) {
    throw new DialogError(`maximum: a whole number from 1 to 64, not "${max}"`);
  }
  if (hi < lo) {
    throw new DialogError(`the maximum (${hi}) is below the minimum (${lo})`);
  }
  if (lo > 0) {
    return { min_replicas: lo, max_replicas: hi };
  }
  const seconds = Number(idle.trim());
  if (!idle.trim() || !Number.isInteger(seconds) || seconds < 10 || seconds > 604800) {
    throw new DialogError(`scale to zero after: whole seconds from 10 to 604800, not "${idle}"`);
  }
  return { min_replicas: 0, max_replicas: hi, scale_to_zero_after: seconds };
}
