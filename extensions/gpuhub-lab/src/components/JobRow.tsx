/** One job in the Jobs panel: what it is, where it stands, what can be done. */
import * as React from 'react';

import {
  afterText,
  attemptLine,
  attemptList,
  attemptsText,
  gpusText,
  isActive,
  runTime,
  stateDetail
} from '../format';
import { IWorkload } from '../types';

export interface IJobActions {
  cancel: (job: IWorkload) => void;
  resubmit: (job: IWorkload) => void;
  /** The log in a tab: the latest attempt (followed), or one attempt's. */
  openLogs: (job: IWorkload, attempt?: number) => void;
  openOutput: (job: IWorkload) => void;
  downloadOutputs: (job: IWorkload) => void;
  deploy: (job: IWorkload) => void;
}

function Action(props: { label: string; title: string; onClick: () => void }): JSX.Element {
  return (
    <button className="jp-mod-styled gpuhub-Job-action" title={props.title} onClick={props.onClick}>
      {props.label}
    </button>
  );
}

export function JobRow(props: { job: IWorkload; showUser: boolean; actions: IJobActions }): JSX.Element {
  const { job, actions } = props;
  const detail = stateDetail(job);
  const attemptsSummary = attemptsText(job);
  const attempts = attemptList(job);
  const time = runTime(job);
  return (
    <li className={`gpuhub-Job gpuhub-mod-${job.state}`} data-job-id={job.id} data-state={job.state}>
      <div className="gpuhub-Job-head">
        <span className="gpuhub-Job-name" title={job.source_path ?? job.id}>
          {job.name}
        </span>
        <span className={`gpuhub-Job-state gpuhub-mod-${job.state}`}>{job.state}</span>
      </div>
      <div className="gpuhub-Job-facts">
        <span className="gpuhub-Job-gpus" title={job.gpu_share ? 'share of one GPU × pool' : 'GPUs × pool'}>
          {gpusText(job)} × {job.pool}
        </span>
        {time && <span title="run time">{time}</span>}
        {attemptsSummary && <span className="gpuhub-Job-attempts">{attemptsSummary}</span>}
        {props.showUser && <span title="user, team">{`${job.user} (${job.team})`}</span>}
        <span className="gpuhub-Job-id">{job.id}</span>
      </div>
      {detail && <div className="gpuhub-Job-detail">{detail}</div>}
      {afterText(job) && <div className="gpuhub-Job-after">{afterText(job)}</div>}
      {attempts.length > 1 && (
        <ol className="gpuhub-Job-attemptList" title="Each time the job ran (a preempted job runs again)">
          {attempts.map(a => (
            <li key={a.number} data-attempt={a.number}>
              <span>{attemptLine(a)}</span>
              <button
                className="gpuhub-Job-attemptLog"
                title={`Open the log of attempt ${a.number + 1}`}
                onClick={() => actions.openLogs(job, a.number)}
              >
                log
              </button>
            </li>
          ))}
        </ol>
      )}
      <div className="gpuhub-Job-actions">
        <Action label="Logs" title="Open the log in a tab" onClick={() => actions.openLogs(job)} />
        {job.output_path && (
          <Action label="Output" title="Open the executed notebook" onClick={() => actions.openOutput(job)} />
        )}
        {!isActive(job) && job.output_dir_path && (
          <Action label="Download" title="Download the outputs as a zip" onClick={() => actions.downloadOutputs(job)} />
        )}
        {job.state === 'succeeded' && job.model_path && (
          <Action label="Deploy outputs…" title="Serve the model this job wrote" onClick={() => actions.deploy(job)} />
        )}
        <Action label="Resubmit" title="Edit and run again" onClick={() => actions.resubmit(job)} />
        {isActive(job) && <Action label="Cancel" title="Cancel the job" onClick={() => actions.cancel(job)} />}
      </div>
    </li>
  );
}
