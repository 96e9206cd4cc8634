/**
 * A sweep in the Jobs panel: one row for all its tasks, with a progress bar
 * (succeeded, failed, running, queued), cancel-all and retry-failed, and
 * when opened the results table: each task's parameters, its metric (the
 * best marked), its state and a link to its output notebook.
 */
import * as React from 'react';

import { afterText } from '../format';
import { countTasks, hasRetryable, progressSegments, progressText } from '../sweep';
import { ISweep, ISweepTask, IWorkload } from '../types';

export interface ISweepActions {
  toggleSweep: (id: string) => void;
  sweepAction: (sweep: ISweep, action: 'cancel' | 'retry') => void;
  openPath: (path: string) => void;
}

export function ProgressBar(props: { counts: ISweep['counts'] | Partial<ISweep['counts']>; total: number }): JSX.Element {
  const segments = progressSegments(props.counts, props.total);
  return (
    <div className="gpuhub-Sweep-bar" role="img" aria-label={progressText(props.counts, props.total)}>
      {segments
        .filter(s => s.count > 0)
        .map(s => (
          <span
            key={s.kind}
            className={`gpuhub-Sweep-segment gpuhub-mod-${s.kind}`}
            data-kind={s.kind}
            data-count={s.count}
            style={{ width: `${s.percent}%` }}
            title={`${s.count} ${s.kind}`}
          />
        ))}
    </div>
  );
}

function value(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function Results(props: { sweep: ISweep; openPath: (path: string) => void }): JSX.Element {
  const { sweep } = props;
  const tasks: ISweepTask[] = [...(sweep.tasks ?? [])].sort((a, b) => a.index - b.index);
  const names = Array.from(new Set(tasks.flatMap(t => Object.keys(t.parameters))));
  const best = sweep.best?.index;
  return (
    <table className="gpuhub-Sweep-results">
      <thead>
        <tr>
          <th>#</th>
          {names.map(n => (
            <th key={n}>{n}</th>
          ))}
          {sweep.metric && <th title={`best: ${sweep.metric.goal === 'max' ? 'highest' : 'lowest'}`}>{sweep.metric.name}</th>}
          <th>state</th>
          <th>output</th>
        </tr>
      </thead>
      <tbody>
        {tasks.map(t => (
          <tr
            key={t.index}
            data-index={t.index}
            data-state={t.state}
            className={t.index === best ? 'gpuhub-mod-best' : ''}
            title={t.reason || t.workload_id}
          >
            <td>
              {t.index}
              {t.index === best && (
                <span className="gpuhub-Sweep-best" title="the best value of the metric">
                  {' '}★ best
                </span>
              )}
            </td>
            {names.map(n => (
              <td key={n}>{n in t.parameters ? value(t.parameters[n]) : ''}</td>
            ))}
            {sweep.metric && <td className="gpuhub-Sweep-metric">{t.metric ?? '–'}</td>}
            <td className={`gpuhub-Job-state gpuhub-mod-${t.state}`}>{t.state}</td>
            <td>
              {t.output_path ? (
                <a
                  href="#"
                  className="gpuhub-Sweep-output"
                  title={t.output_path}
                  onClick={e => {
                    e.preventDefault();
                    props.openPath(t.output_path!);
                  }}
                >
                  notebook
                </a>
              ) : (
                ''
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function SweepRow(props: {
  id: string;
  sweep: ISweep | null;
  tasks: IWorkload[];
  detail: ISweep | undefined;
  expanded: boolean;
  showUser: boolean;
  actions: ISweepActions;
}): JSX.Element {
  const { id, sweep, tasks, actions } = props;
  const counts = sweep?.counts ?? countTasks(tasks);
  const total = sweep?.total ?? tasks.length;
  const state = sweep?.state ?? 'running';
  const name = sweep?.name ?? tasks[0]?.name ?? id;
  const waiting = tasks.find(t => t.state === 'waiting');
  return (
    <li className={`gpuhub-Job gpuhub-Sweep gpuhub-mod-${state}`} data-sweep-id={id} data-state={state}>
      <div className="gpuhub-Job-head">
        <button
          className="gpuhub-Sweep-toggle"
          aria-expanded={props.expanded}
          title={props.expanded ? 'Hide the results' : 'Show every task and its result'}
          onClick={() => actions.toggleSweep(id)}
        >
          {props.expanded ? '▾' : '▸'}
        </button>
        <span className="gpuhub-Job-name">{name}</span>
        <span className="gpuhub-Sweep-kind">sweep of {total}</span>
        <span className={`gpuhub-Job-state gpuhub-mod-${state}`}>{state}</span>
      </div>
      <ProgressBar counts={counts} total={total} />
      <div className="gpuhub-Job-facts">
        <span className="gpuhub-Sweep-progress">{progressText(counts, total)}</span>
        {sweep?.max_running && <span title="tasks at once">max {sweep.max_running} running</span>}
        {sweep?.best && sweep.metric && (
          <span className="gpuhub-Sweep-bestFact">
            best {sweep.metric.name} {sweep.best.value} (#{sweep.best.index})
          </span>
        )}
        {props.showUser && sweep && <span title="user, team">{`${sweep.user} (${sweep.team})`}</span>}
        <span className="gpuhub-Job-id">{id}</span>
      </div>
      {waiting && <div className="gpuhub-Job-detail">{waiting.reason || 'waiting for its dependencies'}</div>}
      {sweep && afterText(sweep) && <div className="gpuhub-Job-after">{afterText(sweep)}</div>}
      <div className="gpuhub-Job-actions">
        {sweep && state === 'running' && (
          <button className="jp-mod-styled gpuhub-Job-action" title="Cancel every task not ended" onClick={() => actions.sweepAction(sweep, 'cancel')}>
            Cancel all
          </button>
        )}
        {sweep && hasRetryable(counts) && (
          <button className="jp-mod-styled gpuhub-Job-action" title="Run the failed and cancelled tasks again" onClick={() => actions.sweepAction(sweep, 'retry')}>
            Retry failed
          </button>
        )}
      </div>
      {props.expanded &&
        (props.detail ? (
          <Results sweep={props.detail} openPath={actions.openPath} />
        ) : (
          <div className="gpuhub-Job-detail">loading the tasks…</div>
        ))}
    </li>
  );
}
