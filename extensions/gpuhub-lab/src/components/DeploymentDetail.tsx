/**
 * One deployment as its main-area tab shows it (DeploymentTab): the endpoint
 * in full (with its copy button), the traffic split, full-size live charts
 * per revision, every revision in a table, and the actions.
 */
import * as React from 'react';

import { deploymentKey } from '../deploymodel';
import { latencyText, percentText, replicasText, revisionRole, rpsText } from '../deployview';
import { IDeployment, IMetricPoint } from '../types';
import { ActionButtons, IDeploymentActions, RevisionState, TrafficBar } from './DeploymentCard';
import { Sparkline } from './Sparkline';

const CHART_HEIGHT = 90;

export function deploymentViewId(d: Pick<IDeployment, 'team' | 'name'>): string {
  return `gpuhub-deployment-${encodeURIComponent(d.team)}-${encodeURIComponent(d.name)}`;
}

function when(iso: string): string {
  const t = Date.parse(iso);
  return Number.isNaN(t) ? iso : new Date(t).toLocaleString();
}

export function DeploymentDetail(props: {
  d: IDeployment;
  endpointUrl: string;
  points: Record<string, IMetricPoint[]>;
  error: string;
  actions: IDeploymentActions;
}): JSX.Element {
  const { d, actions } = props;
  const newestFirst = [...d.revisions].sort((a, b) => b.number - a.number);
  const charted = newestFirst.filter(r => d.traffic[String(r.number)] || r.replicas.length);
  return (
    <div className="gpuhub-DeploymentDetail" data-deployment={deploymentKey(d)}>
      <h1>
        {d.name} <span className="gpuhub-DeploymentDetail-team">team {d.team}</span>
      </h1>
      <div className="gpuhub-Deployment-head">
        <span title="owner">by {d.user}</span>
        <span title="GPUs per replica × pool">
          {d.gpus} × {d.pool} per replica
        </span>
        <span title="replicas">
          {d.min_replicas}–{d.max_replicas} replicas
          {d.scale_to_zero_after ? `, none after ${d.scale_to_zero_after} s idle` : ''}
        </span>
      </div>
      <div className="gpuhub-DeploymentDetail-endpoint">
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
      {props.error && <div className="gpuhub-Deployment-error">{props.error}</div>}
      <ActionButtons d={d} actions={actions} />
      <h2>Live charts (5 s buckets)</h2>
      {charted.map(r => {
        const points = props.points[String(r.number)] ?? [];
        return (
          <section key={r.number} className="gpuhub-DeploymentDetail-charts" data-revision={r.number}>
            <h3>
              r{r.number} · {revisionRole(d, r.number)} · {d.traffic[String(r.number)] ?? 0}%
            </h3>
            {points.length ? (
              <div className="gpuhub-DeploymentDetail-chartRow">
                <Sparkline points={points} series="rps" label="requests/s" format={rpsText} minTop={1} height={CHART_HEIGHT} />
                <Sparkline points={points} series="p99_ms" label="p99 latency" format={latencyText} minTop={10} height={CHART_HEIGHT} />
                <Sparkline points={points} series="error_rate" label="errors" format={percentText} minTop={0.05} height={CHART_HEIGHT} />
              </div>
            ) : (
              <p className="gpuhub-Jobs-empty">No measurements yet.</p>
            )}
          </section>
        );
      })}
      <h2>Revisions</h2>
      <div className="gpuhub-DeploymentDetail-tableWrap">
        <table className="gpuhub-DeploymentDetail-revisions">
          <thead>
            <tr>
              <th>Revision</th>
              <th>Role</th>
              <th>Traffic</th>
              <th>State</th>
              <th>Ready</th>
              <th>Requests (1 min)</th>
              <th>Rate</th>
              <th>p50</th>
              <th>p99</th>
              <th>Errors</th>
              <th>Model</th>
              <th>Runtime</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {newestFirst.map(r => (
              <tr key={r.number} data-revision={r.number}>
                <td>r{r.number}</td>
                <td>{(r.state ?? 'ready') === 'ready' ? revisionRole(d, r.number) : ''}</td>
                <td>{d.traffic[String(r.number)] ?? 0}%</td>
                <td className="gpuhub-DeploymentDetail-state">
                  <RevisionState d={d} r={r} actions={actions} />
                </td>
                <td title="ready / running replicas">{replicasText(r)}</td>
                <td>{r.requests}</td>
                <td>{rpsText(r.rps)}</td>
                <td>{latencyText(r.p50_ms)}</td>
                <td>{latencyText(r.p99_ms)}</td>
                <td>{percentText(r.error_rate)}</td>
                <td className="gpuhub-DeploymentDetail-model">{r.model_path ?? r.model_dir}</td>
                <td>{r.runtime === 'predictor' ? `predictor (${r.predictor})` : r.runtime}</td>
                <td>
                  {when(r.created_at)} by {r.created_by}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
