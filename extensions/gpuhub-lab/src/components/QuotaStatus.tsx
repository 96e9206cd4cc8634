/** The status bar item: "team: used/nominal model", with a per-pool popover. */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { gpuUnits } from '../format';
import { JobsModel } from '../model';
import { poolBreakdown, statusText } from '../quota';

export function QuotaBreakdown(props: { model: JobsModel }): JSX.Element {
  const { model } = props;
  const teams = model.me?.teams.length ? model.me.teams : model.teams.map(t => t.name);
  return (
    <div className="gpuhub-QuotaPopover">
      {teams.map(team => (
        <table key={team}>
          <caption>Team {team}</caption>
          <thead>
            <tr>
              <th>pool</th>
              <th>in use / quota</th>
              <th>may borrow</th>
              <th>free in pool</th>
            </tr>
          </thead>
          <tbody>
            {poolBreakdown(model.teams, model.pools, team).map(v => (
              <tr key={v.pool}>
                <td>{v.pool}</td>
                <td>
                  {gpuUnits(v.used)}/{v.nominal} {v.model}
                </td>
                <td>{v.borrowingLimit === null ? 'no limit' : v.borrowingLimit}</td>
                <td>{v.poolFree}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ))}
    </div>
  );
}

export class QuotaPopoverBody extends ReactWidget {
  constructor(private model: JobsModel) {
    super();
  }

  render(): JSX.Element {
    return <UseSignal signal={this.model.changed}>{() => <QuotaBreakdown model={this.model} />}</UseSignal>;
  }
}

export class QuotaStatus extends ReactWidget {
  constructor(
    private model: JobsModel,
    private onOpen: (anchor: QuotaStatus) => void
  ) {
    super();
    this.addClass('gpuhub-QuotaStatus');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <span className="jp-StatusBar-TextItem" title="GPUs your team uses against its quota" onClick={() => this.onOpen(this)}>
            {statusText(this.model.teams, this.model.pools, this.model.primaryTeam) || 'GPU Hub'}
          </span>
        )}
      </UseSignal>
    );
  }
}
