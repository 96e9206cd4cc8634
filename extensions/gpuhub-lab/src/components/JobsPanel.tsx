/** The Jobs panel of the left sidebar: my jobs or my team's, updated live. */
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { JobScope } from '../api';
import { JobsModel } from '../model';
import { IJobActions, JobRow } from './JobRow';

function JobList(props: { model: JobsModel; actions: IJobActions }): JSX.Element {
  const { model } = props;
  const jobs = model.scope === 'mine' ? model.mine : model.team;
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
      <ul className="gpuhub-Jobs-list">
        {jobs.map(job => (
          <JobRow key={job.id} job={job} showUser={model.scope === 'team'} actions={props.actions} />
        ))}
      </ul>
    </div>
  );
}

export class JobsPanel extends ReactWidget {
  constructor(
    private model: JobsModel,
    private actions: IJobActions
  ) {
    super();
    this.addClass('gpuhub-JobsPanel');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => <JobList model={this.model} actions={this.actions} />}
      </UseSignal>
    );
  }
}
