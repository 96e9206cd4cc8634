/**
 * One deployment in the Deployments panel: its endpoint, message, traffic
 * split, revisions with their replicas, numbers and live charts, and the
 * actions that apply.
 */
import * as React from 'react';

import {
  actionStates,
  DeploymentAction,
  latencyText,
  percentText,
  replicasText,
  listedRevisions,
  revisionRole,
  revisionStatus,
  rpsText,
  trafficSegments
} from '../deployview';
import { IDeployment, IMetricPoint, IRevision } from '../types';
import { Sparkline } from './Sparkline';

export interface IDeploymentActions {
  copyEndpoint: (d: IDeployment) => void;
  run: (d: IDeployment, action: DeploymentAction) => void;
  /** The deployment in a main-area tab (full-size charts, every revision). */
  open: (d: IDeployment) => void;
  /** Cancel a waiting revision: it never rolls out, the deployment serves on as it does. */
  cancelRevision: (d: IDeployment, revision: number) => void;
}

const ACTION_LABELS: Record<DeploymentAction, string> = {
  promote: 'Promote',
  rollback: 'Roll back',
  traffic: 'Traffic…',
  scale: 'Scale…',
  delete: 'Delete…'
};

export function TrafficBar(props: { d: IDeployment }): JSX.Element {
  return (
    <div className="gpuhub-Traffic" title="Traffic split between revisions">
      {trafficSegments(props.d).map(s => (
        <span
          key={s.revision}
          className={`gpuhub-Traffic-segment gpuhub-mod-${s.role}`}
          data-revision={s.revision}
          data-percent={s.percent}
          style={{ left: `${s.offset}%`, width: `${s.percent}%` }}
        >
          r{s.revision} {s.percent}%
        </span>
      ))}
    </div>
  );
}

/** A revision's state in words, and a waiting one's Cancel button. */
export function RevisionState(props: { d: IDeployment; r: IRevision; actions: IDeploymentActions }): JSX.Element {
  const { d, r, actions } = props;
  const status = revisionStatus(d, r);
  return (
    <div className={`gpuhub-Revision-state gpuhub-mod-${status.phase.replace(' ', '-')}`} data-phase={status.phase}>
      <span className="gpuhub-Revision-stateText" title={r.after?.length ? `after ${r.after.map(a => `${a.id} (${a.condition})`).join(', ')}` : ''}>
        {status.text}
      </span>
      {status.phase === 'waiting' && (
        <button
          className="jp-mod-styled gpuhub-Revision-cancel"
          data-revision={r.number}
          title={`Cancel revision ${r.number}: it never rolls out; the deployment serves on as it does now`}
          onClick={() => actions.cancelRevision(d, r.number)}
        >
          Cancel revision
        </button>
      )}
    </div>
  );
}

function RevisionRow(props: {
  d: IDeployment;
  r: IRevision;
  points: IMetricPoint[];
  actions: IDeploymentActions;
}): JSX.Element {
  const { d, r, points } = props;
  const role = revisionRole(d, r.number);
  const share = d.traffic[String(r.number)] ?? 0;
  const deployed = (r.state ?? 'ready') === 'ready';
  return (
    <li
      className={`gpuhub-Revision gpuhub-mod-${role}`}
      data-revision={r.number}
      data-ready={r.ready_replicas}
      data-state={r.state ?? 'ready'}
    >
      <div className="gpuhub-Revision-head">
        <span className="gpuhub-Revision-number">r{r.number}</span>
        {deployed && role !== 'other' && (
          <span className={`gpuhub-Revision-role gpuhub-mod-${role}`}>{role}</span>
        )}
        <span title="share of the requests">{share}%</span>
        <span className="gpuhub-Revision-replicas" title="ready / running replicas">
          {replicasText(r)} ready
        </span>
        <span className="gpuhub-Revision-model" title={r.model_dir}>
          {r.model_path ?? r.model_dir}
        </span>
      </div>
      <RevisionState d={d} r={r} actions={props.actions} />
      {deployed && (
        <div className="gpuhub-Revision-stats" title="the last minute">
          <span className="gpuhub-Revision-requests">{r.requests} req</span>
          <span>{rpsText(r.rps)}</span>
          <span>
            p50 {latencyText(r.p50_ms)} · p99 {latencyText(r.p99_ms)}
          </span>
          <span>errors {percentText(r.error_rate)}</span>
        </div>
      )}
      {deployed && points.length > 0 && (
        <div className="gpuhub-Revision-charts">
          <Sparkline points={points} series="rps" label="rps" format={rpsText} minTop={1} />
          <Sparkline points={points} series="p99_ms" label="p99" format={latencyText} minTop={10} />
          <Sparkline points={points} series="error_rate" label="errors" format={percentText} minTop={0.05} />
        </div>
      )}
    </li>
  );
}

export function DeploymentCard(props: {
  d: IDeployment;
  endpointUrl: string;
  points: Record<string, IMetricPoint[]>;
  error: string;
  actions: IDeploymentActions;
}): JSX.Element {
  const { d, actions } = props;
  // Revisions that serve or still run, newest first; idle old ones are summed up.
  const shown = listedRevisions(d);
  const hidden = d.revisions.length - shown.length;
  return (
    <li className="gpuhub-Deployment" data-deployment={`${d.team}/${d.name}`}>
      <div className="gpuhub-Deployment-head">
        <button
          className="gpuhub-Deployment-name"
          title="Open in a tab: full-size charts, every revision"
          onClick={() => actions.open(d)}
        >
          {d.name}
        </button>
        <span className="gpuhub-Deployment-owner" title="team, owner">
          {d.team} · {d.user}
        </span>
        <span title="GPUs per replica × pool, replicas min–max">
          {d.gpus} × {d.pool} · {d.min_replicas}–{d.max_replicas} replicas
        </span>
      </div>
      <div className="gpuhub-Deployment-endpoint">
        <code title="POST an Open Inference Protocol v2 request here">{props.endpointUrl}</code>
        <button
          className="jp-mod-styled gpuhub-Deployment-copy"
          title="Copy the endpoint's URL"
          onClick={() => actions.copyEndpoint(d)}
        >
          Copy
        </button>
      </div>
      {d.message && <div className="gpuhub-Deployment-message">{d.message}</div>}
      <TrafficBar d={d} />
      <ul className="gpuhub-Revisions">
        {shown.map(r => (
          <RevisionRow key={r.number} d={d} r={r} points={props.points[String(r.number)] ?? []} actions={actions} />
        ))}
      </ul>
      {hidden > 0 && (
        <div className="gpuhub-Deployment-older">
          {hidden} older revision{hidden > 1 ? 's' : ''} without traffic (open the deployment for all)
        </div>
      )}
      {props.error && <div className="gpuhub-Deployment-error">{props.error}</div>}
      <ActionButtons d={d} actions={actions} />
    </li>
  );
}

/** The actions that apply, each saying what it does or why it does not apply. */
export function ActionButtons(props: { d: IDeployment; actions: IDeploymentActions }): JSX.Element {
  const { d, actions } = props;
  return (
    <div className="gpuhub-Deployment-actions">
      {actionStates(d).map(a => (
        <button
          key={a.action}
          className={`jp-mod-styled gpuhub-Deployment-action${a.action === 'delete' ? ' gpuhub-mod-warn' : ''}`}
          data-action={a.action}
          title={a.title}
          disabled={!a.enabled}
          onClick={() => actions.run(d, a.action)}
        >
          {ACTION_LABELS[a.action]}
        </button>
      ))}
    </div>
  );
}
