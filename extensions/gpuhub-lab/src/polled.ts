/**
 * A model refreshed by one poll, as the panels want it: started once,
 * refreshed at once on demand, backing off after failures (a refresh that
 * throws) up to a longest wait, and standing by as told (while the browser
 * tab, or a panel, is hidden).
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

export abstract class PolledModel {
  constructor(options: {
    name: string;
    /** Seconds between refreshes, to start with. */
    interval: number;
    /** Longest wait after failures, in seconds. */
    maxInterval: number;
    standby: Poll.Standby | (() => boolean | Poll.Standby);
  }) {
    this.maxInterval = options.maxInterval;
    this.poll = new Poll({
      auto: false,
      factory: () => this.refresh(),
      frequency: this.frequency(options.interval),
      name: options.name,
      standby: options.standby
    });
  }

  readonly poll: Poll;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  start(): void {
    void this.poll.start();
  }

  /**
   * Poll now, not at the next tick; resolves once that poll is done. A
   * refresh already under way began before whatever the caller just did
   * (a submit): this one waits for it, then polls again, rather than
   * being folded into it as the Poll would.
   */
  async refreshNow(): Promise<void> {
    if (this.poll.state.phase === 'refreshed') {
      await this.poll.tick;
      // The Poll sets its next timer a microtask after the tick; asked again
      // before that, it would lose that timer's handle and never clear it.
      await Promise.resolve();
    }
    await this.poll.refresh();
    await this.poll.tick;
  }

  dispose(): void {
    // Poll.dispose() leaves its pending timer: stopping first clears it.
    void this.poll.stop();
    this.poll.dispose();
  }

  /** The next refreshes come every `seconds` (with backoff after failures). */
  protected setInterval(seconds: number): void {
    this.poll.frequency = this.frequency(seconds);
  }

  /** Fetch and emit `changed`; throw to back off. */
  protected abstract refresh(): Promise<void>;

  private frequency(seconds: number) {
    return { interval: seconds * 1000, backoff: true, max: this.maxInterval * 1000 };
  }

  protected maxInterval: number;
  protected _changed = new Signal<this, void>(this);
}
