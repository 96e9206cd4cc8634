/**
 * The Deployments panel's live state: the deployments I can see and the
 * metrics of each, refreshed by one poll while the panel is shown (never
 * while it or the browser tab is hidden), faster while a revision waits for
 * its first replica, backing off while the service does not answer.
 */
import type { GpuHubApi } from './api';
import { isStarting } from './deployview';
import { PolledModel } from './polled';
import { IDeployment, IDeploymentMetrics } from './types';

export interface IDeployPollSettings {
  /** Seconds between polls while a revision waits for a ready replica. */
  activeInterval: number;
  /** Seconds between polls otherwise. */
  interval: number;
  /** Longest wait after failures (backoff). */
  maxInterval: number;
}

export function deploymentKey(d: Pick<IDeployment, 'team' | 'name'>): string {
  return `${d.team}/${d.name}`;
}

export class DeploymentsModel extends PolledModel {
  constructor(
    readonly api: GpuHubApi,
    private pollSettings: IDeployPollSettings,
    isShown: () => boolean
  ) {
    super({
      name: 'gpuhub-lab:deployments',
      interval: pollSettings.interval,
      maxInterval: pollSettings.maxInterval,
      standby: () => !isShown() || 'when-hidden'
    });
  }
  deployments: IDeployment[] = [];
  /** By deployment key. */
  metrics: Record<string, IDeploymentMetrics> = {};
  /** The service's answer to the last refused action, by deployment key. */
  actionErrors: Record<string, string> = {};
  error = '';
  loaded = false;

  configure(settings: IDeployPollSettings): void {
    this.pollSettings = settings;
    this.maxInterval = settings.maxInterval;
  }

  /** Do an action; a refusal is kept with the deployment (the service's message). */
  async act(d: IDeployment, action: string, body?: object): Promise<boolean> {
    const key = deploymentKey(d);
    let done = true;
    try {
      if (action === 'delete') {
        await this.api.deleteDeployment(d);
      } else if (action === 'cancel-revision') {
        await this.api.cancelRevision(d, (body as { revision: number }).revision);
      } else {
        await this.api.deploymentAction(d, action, body);
      }
      delete this.actionErrors[key];
    } catch (e) {
      this.actionErrors[key] = `${action}: ${(e as Error).message}`;
      done = false;
    }
    this._changed.emit();
    await this.refreshNow();
    return done;
  }

  protected async refresh(): Promise<void> {
    try {
      const deployments = await this.api.deployments();
      // One deployment's metrics failing leaves its charts as they were.
      const metrics = await Promise.all(deployments.map(d => this.api.metrics(d).catch(() => null)));
      const byKey: Record<string, IDeploymentMetrics> = {};
      deployments.forEach((d, i) => {
        const m = metrics[i] ?? this.metrics[deploymentKey(d)];
        if (m) {
          byKey[deploymentKey(d)] = m;
        }
      });
      Object.assign(this, { deployments, metrics: byKey, error: '', loaded: true });
      this._changed.emit();
      const starting = deployments.some(isStarting);
      this.setInterval(starting ? this.pollSettings.activeInterval : this.pollSettings.interval);
    } catch (error) {
      this.error = String((error as Error).message ?? error);
      this._changed.emit();
      throw error; // the poll backs off
    }
  }
}
