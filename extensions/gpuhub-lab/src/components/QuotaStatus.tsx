/** The status bar item: "team: used/nominal model", with a per-pool popover. */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { gpuUnits } from '../format';
import { JobsModel } from '../model';
import { poolBreakdown, statusText, storageLine } from '../quota';

export function QuotaBreakdown(props: { model: JobsModel }): JSX.Element {
  const { model } = props;
  const teams = model.me?.teams.length ? model.me.teams : model.teams.map(t => t.name);
  return (
    <div className="gpuhub-QuotaPopover">
      {teams.map(team => (
        <React.Fragment key={team}>
        <table>
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
        <StorageLine line={storageLine(model.teams, team)} />
        </React.Fragment>
      ))}
    </div>
  );
}

function StorageLine(props: { line: ReturnType<typeof storageLine> }): JSX.Element | null {
  const { line } = props;
  if (!line) {
    return null;
  }
  return (
    <p className={`gpuhub-Storage gpuhub-Storage-${line.state}`}>
      {line.percent !== null && <progress max={100} value={line.percent} />} {line.text}
    </p>
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

/** " · space 95 %" in the status bar once the team's space is over 90 % of its quota. */
function spaceBadge(line: ReturnType<typeof storageLine>): string {
  return line && line.state !== 'ok' ? ` · space ${line.percent} %` : '';
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
            {spaceBadge(storageLine(this.model.teams, this.model.primaryTeam))}
          </span>
        )}
      </UseSignal>
    );
  }
}
