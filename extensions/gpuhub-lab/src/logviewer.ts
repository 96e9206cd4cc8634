/**
 * A tab that follows a job's log as it is written (server-sent events through
 * the server extension) and keeps the tail of finished ones.
 */
import { Widget } from '@lumino/widgets';

import { GpuHubApi } from './api';
import { isActive, tail } from './format';
import { IWorkload } from './types';

export class LogViewer extends Widget {
  constructor(
    private api: GpuHubApi,
    readonly job: IWorkload,
    private maxChars: number
  ) {
    super();
    this.id = `gpuhub-log-${job.id}`;
    this.addClass('gpuhub-LogViewer');
    this.title.label = `Log: ${job.name}`;
    this.title.caption = `Log of GPU job ${job.name} (${job.id})`;
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
    if (isActive(job)) {
      this.follow(job.attempt);
      return;
    }
    try {
      this.setText(await this.api.logs(job.id));
      this.setStatus(`${job.state}: ${job.reason || ''} (attempt ${job.attempt + 1})`);
    } catch (error) {
      this.setStatus(`cannot read the log: ${(error as Error).message}`);
    }
  }

  private follow(attempt: number): void {
    this.source?.close();
    this.text = '';
    this.setText('');
    this.setStatus(`following attempt ${attempt + 1}…`);
    const source = new EventSource(this.api.logStreamUrl(this.job.id, attempt));
    this.source = source;
    source.addEventListener('log', event => {
      const data = JSON.parse((event as MessageEvent).data);
      this.setText(this.text + (data.text ?? ''));
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
    source.onopen = () => this.setStatus(`following attempt ${attempt + 1}…`);
  }

  private async ended(attempt: number): Promise<void> {
    let job: IWorkload;
    try {
      job = await this.api.job(this.job.id);
    } catch (error) {
      this.setStatus(`log ended; cannot read the job: ${(error as Error).message}`);
      return;
    }
    if (isActive(job) && job.attempt > attempt) {
      this.follow(job.attempt); // preempted and requeued: the next attempt's log
    } else if (isActive(job)) {
      // queued, not started yet: look again shortly
      this.setStatus(`${job.state}: ${job.reason || 'waiting'}`);
      setTimeout(() => !this.isDisposed && this.follow(job.attempt), 2000);
    } else {
      this.setStatus(`${job.state}: ${job.reason || ''} (attempt ${job.attempt + 1})`);
    }
  }

  private setText(text: string): void {
    const atBottom = this.node.scrollTop + this.node.clientHeight >= this.node.scrollHeight - 4;
    this.text = tail(text, this.maxChars);
    this.pre.textContent = this.text;
    if (atBottom) {
      this.node.scrollTop = this.node.scrollHeight;
    }
  }

  private setStatus(text: string): void {
    this.status.textContent = text;
  }

  private text = '';
  private pre: HTMLPreElement;
  private status: HTMLDivElement;
  private source: EventSource | null = null;
}
