/** The Schedules section of the Jobs panel: when each runs next, how its last run went, what to do with it. */
import * as React from 'react';

import { describeCron } from '../cron';
import { relativeTime } from '../format';
import { ISchedule } from '../types';

export interface IScheduleActions {
  scheduleAction: (schedule: ISchedule, action: 'pause' | 'resume' | 'run') => void;
  deleteSchedule: (schedule: ISchedule) => void;
  /** Change its name, cron expression, time zone or catch-up in a dialog. */
  editSchedule: (schedule: ISchedule) => void;
}

function Button(props: { label: string; title: string; onClick: () => void }): JSX.Element {
  return (
    <button className="jp-mod-styled gpuhub-Job-action" title={props.title} onClick={props.onClick}>
      {props.label}
    </button>
  );
}

function ScheduleRow(props: { schedule: ISchedule; showUser: boolean; actions: IScheduleActions }): JSX.Element {
  const { schedule: s, actions } = props;
  const last = s.recent[0];
  return (
    <li className={`gpuhub-Schedule${s.paused ? ' gpuhub-mod-paused' : ''}`} data-schedule-id={s.id} data-paused={String(s.paused)}>
      <div className="gpuhub-Job-head">
        <span className="gpuhub-Job-name" title={s.source_path ?? ''}>
          {s.name}
        </span>
        <span className="gpuhub-Schedule-cron" title={s.cron}>
          {describeCron(s.cron)} ({s.timezone})
        </span>
      </div>
      <div className="gpuhub-Job-facts">
        <span className="gpuhub-Schedule-next" title={s.next_run_at ? new Date(s.next_run_at).toLocaleString() : ''}>
          {s.paused ? 'paused' : s.next_run_at ? `next ${relativeTime(s.next_run_at)}` : 'no next run'}
        </span>
        <span className="gpuhub-Schedule-last" data-state={last?.state ?? ''}>
          {last ? `last run ${relativeTime(last.fired_at)}: ${last.state ?? 'gone'}` : 'not run yet'}
        </span>
        {s.last_error && (
          <span className="gpuhub-Schedule-error" title={s.last_error_at ? new Date(s.last_error_at).toLocaleString() : ''}>
            {`last firing failed${s.last_error_at ? ` ${relativeTime(s.last_error_at)}` : ''}: ${s.last_error}`}
          </span>
        )}
        {props.showUser && <span title="user, team">{`${s.user} (${s.team})`}</span>}
        <span className="gpuhub-Job-id">{s.id}</span>
      </div>
      <div className="gpuhub-Job-actions">
        {s.paused ? (
          <Button label="Resume" title="Run at the next firing again" onClick={() => actions.scheduleAction(s, 'resume')} />
        ) : (
          <Button label="Pause" title="No runs until resumed" onClick={() => actions.scheduleAction(s, 'pause')} />
        )}
        <Button label="Run now" title="Make a job from it now" onClick={() => actions.scheduleAction(s, 'run')} />
        <Button label="Edit…" title="Change its name, when it runs, its time zone" onClick={() => actions.editSchedule(s)} />
        <Button label="Delete" title="Delete the schedule (the jobs it made stay)" onClick={() => actions.deleteSchedule(s)} />
      </div>
    </li>
  );
}

export function ScheduleList(props: { schedules: ISchedule[]; showUser: boolean; actions: IScheduleActions }): JSX.Element | null {
  if (!props.schedules.length) {
    return null;
  }
  return (
    <div className="gpuhub-Schedules">
      <h3>Schedules</h3>
      <ul className="gpuhub-Jobs-list">
        {props.schedules.map(s => (
          <ScheduleRow key={s.id} schedule={s} showUser={props.showUser} actions={props.actions} />
        ))}
      </ul>
    </div>
  );
}
