/** The Deployments panel of the left sidebar: the deployments I can see, live while it is shown. */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { deploymentKey, DeploymentsModel } from '../deploymodel';
import { chartWindow } from '../sparkline';
import { IDeployment } from '../types';
import { DeploymentCard, IDeploymentActions } from './DeploymentCard';

export interface IDeploymentsPanelActions extends IDeploymentActions {
  deployNew: () => void;
  endpointUrl: (d: IDeployment) => string;
}

function DeploymentList(props: { model: DeploymentsModel; actions: IDeploymentsPanelActions }): JSX.Element {
  const { model, actions } = props;
  return (
    <div className="gpuhub-Deployments">
      <div className="gpuhub-Jobs-header">
        <h2>Deployments</h2>
        <button className="jp-mod-styled jp-mod-accept gpuhub-Deployments-new" onClick={actions.deployNew}>
          Deploy model…
        </button>
      </div>
      {model.error && <div className="gpuhub-Jobs-error">{model.error}</div>}
      {model.loaded && model.deployments.length === 0 && !model.error && (
        <p className="gpuhub-Jobs-empty">
          No deployments yet. Use “Deploy model…” on a folder with a model.joblib (right click in the file
          browser), or “Deploy outputs…” on a finished job.
        </p>
      )}
      <ul className="gpuhub-Deployments-list">
        {model.deployments.map(d => (
          <DeploymentCard
            key={deploymentKey(d)}
            d={d}
            endpointUrl={actions.endpointUrl(d)}
            points={chartWindow(model.metrics[deploymentKey(d)]?.revisions ?? {})}
            error={model.actionErrors[deploymentKey(d)] ?? ''}
            actions={actions}
          />
        ))}
      </ul>
    </div>
  );
}

export class DeploymentsPanel extends ReactWidget {
  constructor(
    private model: DeploymentsModel,
    private actions: IDeploymentsPanelActions
  ) {
    super();
    this.addClass('gpuhub-DeploymentsPanel');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => <DeploymentList model={this.model} actions={this.actions} />}
      </UseSignal>
    );
  }

  /** The poll stands by while the panel is hidden: catch up at once when it shows. */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refreshNow();
  }
}
