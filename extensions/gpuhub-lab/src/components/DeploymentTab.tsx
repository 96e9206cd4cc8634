/**
 * A deployment's main-area tab: DeploymentDetail of the Deployments panel's
 * model, so it is as fresh as the panel (and keeps the poll going while shown).
 */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { deploymentKey, DeploymentsModel } from '../deploymodel';
import { chartWindow } from '../sparkline';
import { IDeployment } from '../types';
import { IDeploymentActions } from './DeploymentCard';
import { DeploymentDetail } from './DeploymentDetail';

/** The tab: follows the model; says so when the deployment is gone. */
export class DeploymentTab extends ReactWidget {
  constructor(
    private model: DeploymentsModel,
    readonly key: string,
    private endpointUrl: (d: IDeployment) => string,
    private actions: IDeploymentActions
  ) {
    super();
    this.addClass('gpuhub-DeploymentView');
    this.title.closable = true;
  }

  /** The poll stands by while nothing shows deployments: catch up at once. */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refreshNow();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => {
          const d = this.model.deployments.find(x => deploymentKey(x) === this.key);
          if (!d) {
            return (
              <div className="gpuhub-DeploymentDetail">
                <p className="gpuhub-Jobs-empty">
                  {this.model.loaded ? `Deployment ${this.key} is gone.` : 'Loading…'}
                </p>
              </div>
            );
          }
          return (
            <DeploymentDetail
              d={d}
              endpointUrl={this.endpointUrl(d)}
              points={chartWindow(this.model.metrics[this.key]?.revisions ?? {})}
              error={this.model.actionErrors[this.key] ?? ''}
              actions={this.actions}
            />
          );
        }}
      </UseSignal>
    );
  }
}
