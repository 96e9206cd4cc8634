/**
 * A tab that follows a job's log as it is written (server-sent events through
 * the server extension) and keeps the tail of finished ones. A job that ran
 * more than once (preempted, requeued) shows every attempt's log, each under
 * a line that names it, and the status line says which attempt it follows
 * and why it waits; with `attempt` given, the tab shows that attempt only.
 */
import { Widget } from '@lumino/widgets';

import { GpuHubApi } from './api';
import { attemptHeader, isActive, joinLog, tail } from './format';
import { IWorkload } from './types';

export function logViewerId(id: string, attempt?: number): string {
  return attempt === undefined ? `gpuhub-log-${id}` : `gpuhub-log-${id}-attempt-${attempt}`;
}

export class LogViewer extends Widget {
  constructor(
    private api: GpuHubApi,
    readonly job: IWorkload,
    private maxChars: number,
    /** Only this attempt (0-based), not the whole history. */
    readonly attempt?: number
  ) {
    super();
    this.id = logViewerId(job.id, attempt);
    this.addClass('gpuhub-LogViewer');
    const which = attempt === undefined ? '' : ` (attempt ${attempt + 1})`;
    this.title.label = `Log: ${job.name}${which}`;
    this.title.caption = `Log of GPU job ${job.name} (${job.id})${which}`;
    this.title.closable = true;
    this.status = document.createElement('div');
    this.status.className = 'gpuhub-LogViewer-status';
    this.pre = document.createElement('pre');
    this.pre.className = 'gpuhub-LogViewer-text';
    this.node.append(this.status, this.pre);
    void this.show_(job);
  }

  dispose(): void {
    this.source?.close();
    super.dispose();
  }

  private async show_(job: IWorkload): Promise<void> {
    try {
      if (this.attempt !== undefined) {
        await this.showOne(job, this.attempt);
        return;
      }
      // Every attempt before the current one, as it ended.
      for (let n = 0; n < job.attempt; n++) {
        this.earlier = joinLog(this.earlier, attemptHeader(job, n), await this.api.logs(job.id, n));
      }
      if (isActive(job)) {
        // a queued attempt's stream stays open, without events, until it runs
        this.waiting = job.state === 'queued' ? this.waitingText(job) : null;
        this.follow(job.attempt);
        return;
      }
      const last = await this.api.logs(job.id, job.attempt);
      this.earlier = job.attempt > 0 ? joinLog(this.earlier, attemptHeader(job, job.attempt), last) : last;
      this.render();
      this.setStatus(`${job.state}: ${job.reason || ''} (attempt ${job.attempt + 1})`);
    } catch (error) {
      this.setStatus(`cannot read the log: ${(error as Error).message}`);
    }
  }

  private async showOne(job: IWorkload, attempt: number): Promise<void> {
    if (attempt === job.attempt && isActive(job)) {
      this.waiting = job.state === 'queued' ? this.waitingText(job) : null;
      this.follow(attempt);
      return;
    }
    this.earlier = await this.api.logs(job.id, attempt);
    this.render();
    const a = job.attempts?.find(x => x.number === attempt);
    this.setStatus(a ? `attempt ${attempt + 1}: ${a.state}${a.reason ? ` (${a.reason})` : ''}` : `attempt ${attempt + 1}`);
  }

  private follow(attempt: number): void {
    this.source?.close();
    this.current = ''; // the stream starts from the attempt's first byte
    this.following = attempt;
    this.render();
    this.setStatus(this.followingText(attempt));
    const source = new EventSource(this.api.logStreamUrl(this.job.id, attempt));
    this.source = source;
    source.addEventListener('log', event => {
      const data = JSON.parse((event as MessageEvent).data);
      this.current += data.text ?? '';
      this.waiting = null;
      this.setStatus(this.followingText(attempt));
      this.render();
    });
    source.addEventListener('end', () => {
      source.close();
      void this.ended(attempt);
    });
    source.onerror = () => {
      // EventSource reconnects by itself (with Last-Event-ID); say so meanwhile.
      if (source.readyState !== EventSource.CLOSED) {
        this.setStatus('connection lost, reconnecting…');
      }
    };
    source.onopen = () => this.setStatus(this.followingText(attempt));
  }

  /** What the status line says while the stream is open: why it waits, else what it follows. */
  private followingText(attempt: number): string {
    return this.waiting ?? `following attempt ${attempt + 1}…`;
  }

  private async ended(attempt: number): Promise<void> {
    let job: IWorkload;
    try {
      job = await this.api.job(this.job.id);
    } catch (error) {
      this.setStatus(`log ended; cannot read the job: ${(error as Error).message}`);
      return;
    }
    if (this.attempt === undefined && job.attempt > attempt) {
      // preempted and requeued: keep this attempt's log, follow the next one's
      this.earlier = joinLog(this.earlier, attemptHeader(job, attempt), this.current);
      for (let n = attempt + 1; n < job.attempt; n++) {
        this.earlier = joinLog(this.earlier, attemptHeader(job, n), await this.api.logs(job.id, n));
      }
      this.current = '';
      this.waiting = job.state === 'queued' ? this.waitingText(job) : null;
      this.follow(job.attempt);
    } else if (isActive(job) && job.attempt === attempt) {
      // queued, not started yet: say why, look again shortly
      this.waiting = this.waitingText(job);
      this.setStatus(this.waiting);
      setTimeout(() => !this.isDisposed && this.follow(job.attempt), 2000);
    } else {
      this.setStatus(`${job.state}: ${job.reason || ''} (attempt ${attempt + 1})`);
    }
  }

  private waitingText(job: IWorkload): string {
    return (
      `attempt ${job.attempt + 1} is ${job.state}: ${job.reason || 'waiting'}` +
      ' — its log starts when it runs'
    );
  }

  /** The earlier attempts, then the followed one (under its own header once there were others). */
  private render(): void {
    const atBottom = this.node.scrollTop + this.node.clientHeight >= this.node.scrollHeight - 4;
    const text =
      this.earlier && this.following !== null
        ? joinLog(this.earlier, attemptHeader(null, this.following), this.current)
        : this.earlier + this.current;
    this.pre.textContent = tail(text, this.maxChars);
    if (atBottom) {
      this.node.scrollTop = this.node.scrollHeight;
    }
  }

  private setStatus(text: string): void {
    this.status.textContent = text;
  }

  private earlier = '';
  private current = '';
  private following: number | null = null;
  /** Why the followed attempt has no log yet (it waits in the queue), while it does. */
  private waiting: string | null = null;
  private pre: HTMLPreElement;
  private status: HTMLDivElement;
  private source: EventSource | null = null;
}
