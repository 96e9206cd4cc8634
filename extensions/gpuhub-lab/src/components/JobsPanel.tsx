/** The Jobs panel of the left sidebar: my jobs or my team's, updated live. */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import type { Message } from '@lumino/messaging';

import { JobScope } from '../api';
import { JOBS_PAGE, JobsModel } from '../model';
import { groupBySweep } from '../sweep';
import { IJobActions, JobRow } from './JobRow';
import { IScheduleActions, ScheduleList } from './Schedules';
import { ISweepActions, SweepRow } from './SweepRow';

export type IPanelActions = IJobActions & ISweepActions & IScheduleActions;

function JobList(props: { model: JobsModel; actions: IPanelActions }): JSX.Element {
  const { model } = props;
  const jobs = model.scope === 'mine' ? model.mine : model.team;
  const items = groupBySweep(jobs, model.sweeps);
  const showUser = model.scope === 'team';
  const tab = (scope: JobScope, label: string) => (
    <button
      className={`gpuhub-Jobs-tab${model.scope === scope ? ' gpuhub-mod-active' : ''}`}
      data-scope={scope}
      onClick={() => model.setScope(scope)}
    >
      {label}
    </button>
  );
  return (
    <div className="gpuhub-Jobs">
      <div className="gpuhub-Jobs-header">
        <h2>GPU jobs</h2>
        <div className="gpuhub-Jobs-tabs">
          {tab('mine', 'Mine')}
          {tab('team', 'My teams')}
        </div>
      </div>
      {model.error && <div className="gpuhub-Jobs-error">{model.error}</div>}
      {jobs.length === 0 && !model.error && (
        <p className="gpuhub-Jobs-empty">
          No jobs yet. Use “Submit as job” on a notebook, a .py or a .sh file.
        </p>
      )}
      <ScheduleList schedules={model.schedules} showUser={showUser} actions={props.actions} />
      <ul className="gpuhub-Jobs-list">
        {items.map(item =>
          item.kind === 'job' ? (
            <JobRow key={item.job.id} job={item.job} showUser={showUser} actions={props.actions} />
          ) : (
            <SweepRow
              key={item.id}
              id={item.id}
              sweep={item.sweep}
              tasks={item.tasks}
              detail={model.details.get(item.id)}
              expanded={model.expanded.has(item.id)}
              showUser={showUser}
              actions={props.actions}
            />
          )
        )}
      </ul>
      {model.more[model.scope] && (
        <button className="gpuhub-Jobs-more" onClick={() => model.showMore()}>
          Show {JOBS_PAGE} more (older jobs)
        </button>
      )}
    </div>
  );
}

export class JobsPanel extends ReactWidget {
  constructor(
    private model: JobsModel,
    private actions: IPanelActions
  ) {
    super();
    this.addClass('gpuhub-JobsPanel');
  }

  /** Shown: sweeps and schedules (fetched only while it is) are brought up to date at once. */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.model.refreshNow();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => <JobList model={this.model} actions={this.actions} />}
      </UseSignal>
    );
  }
}
