/**
 * What changed between two polls of the user's jobs, as notifications:
 * started, succeeded, failed, preempted. Pure, so it is tested alone.
 */
import { shareFraction } from './format';
import { IWorkload } from './types';

export type NoteKind = 'queued' | 'started' | 'succeeded' | 'failed' | 'preempted' | 'cancelled';

export interface IJobNote {
  kind: NoteKind;
  job: IWorkload;
  message: string;
}

export interface IJobSnapshot {
  state: string;
  attempt: number;
  /** It had an expected start time (said once, in a "queued" note). */
  estimated: boolean;
}

function estimated(job: IWorkload): boolean {
  return job.state === 'queued' && !!job.expected_start?.time;
}

export function snapshot(jobs: IWorkload[]): Map<string, IJobSnapshot> {
  return new Map(jobs.map(j => [j.id, { state: j.state, attempt: j.attempt, estimated: estimated(j) }]));
}

/**
 * Notes for jobs whose state changed since `before`. Jobs not seen before
 * are only announced when they already started (a job submitted elsewhere
 * that ran between polls); a first poll (`before` null) announces nothing.
 */
export function jobNotes(before: Map<string, IJobSnapshot> | null, jobs: IWorkload[]): IJobNote[] {
  if (before === null) {
    return [];
  }
  const notes: IJobNote[] = [];
  for (const job of jobs) {
    const prev = before.get(job.id) ?? { state: 'queued', attempt: job.attempt, estimated: false };
    const label = `Job ${job.name || job.id}`;
    if (prev.state === job.state && prev.attempt === job.attempt) {
      if (estimated(job) && !prev.estimated) {
        // Its first estimate (a cycle looked at it): when it will start.
        notes.push({ kind: 'queued', job, message: `${label} is queued: ${job.expected_start!.text}` });
      }
      continue;
    }
    if (job.attempt > prev.attempt) {
      notes.push({
        kind: 'preempted',
        job,
        message: `${label} was preempted (${job.reason || 'requeued'}); attempt ${job.attempt + 1} ${
          job.state === 'running' ? 'is running' : 'is queued'
        }`
      });
      continue;
    }
    if (job.state === 'running' && prev.state === 'queued') {
      const on = job.gpu_share ? `${shareFraction(job.gpu_share)} of one ${job.pool} GPU` : `${job.gpus} × ${job.pool} GPUs`;
      notes.push({ kind: 'started', job, message: `${label} started on ${on}` });
    } else if (job.state === 'succeeded') {
      notes.push({ kind: 'succeeded', job, message: `${label} succeeded` });
    } else if (job.state === 'failed') {
      notes.push({
        kind: 'failed',
        job,
        message: `${label} failed: ${job.reason || `exit code ${job.exit_code}`}`
      });
    } else if (job.state === 'cancelled' && prev.state !== 'cancelled') {
      notes.push({ kind: 'cancelled', job, message: `${label} was cancelled` });
    }
  }
  return notes;
}

/**
 * Seconds until the next poll: fast while one of the jobs is queued or
 * running, slower when nothing moves. Fast once more right after a job
 * changed state: the quotas read in the same poll may not show it yet.
 */
export function pollInterval(jobs: IWorkload[], fast: number, slow: number, justChanged = false): number {
  return justChanged || jobs.some(j => ['queued', 'running', 'stopping'].includes(j.state)) ? fast : slow;
}
