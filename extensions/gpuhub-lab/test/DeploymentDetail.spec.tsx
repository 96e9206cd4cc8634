import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { IDeploymentActions } from '../src/components/DeploymentCard';
import { DeploymentDetail, deploymentViewId } from '../src/components/DeploymentDetail';
import { IMetricPoint } from '../src/types';
import { revision, withCanary } from './fixtures';

const actions: IDeploymentActions = {
  copyEndpoint: () => undefined,
  run: () => undefined,
  open: () => undefined,
  cancelRevision: () => undefined
};
const URL = 'https://hub.example.org/services/gpuhub/endpoints/vision/iris/v2/models/iris/infer';

function point(rps: number): IMetricPoint {
  return { t: '', requests: rps * 5, rps, error_rate: 0, p50_ms: 3, p99_ms: 9, ready_replicas: 1, in_flight: 0 };
}

describe("a deployment's tab", () => {
  const d = withCanary();
  d.revisions.push(revision({ number: 0, replicas: [], ready_replicas: 0, model_path: 'models/old' }));
  // the last bucket of each is still running: not drawn
  const points = { '1': [point(1), point(2), point(3)], '2': [point(0.5), point(0.5)] };
  const html = renderToStaticMarkup(<DeploymentDetail d={d} endpointUrl={URL} points={points} error="" actions={actions} />);

  it('shows the whole endpoint URL with its copy button', () => {
    expect(html).toContain(`<code title="POST an Open Inference Protocol v2 request here">${URL}</code>`);
    expect(html).toMatch(/<button[^>]*gpuhub-Deployment-copy[^>]*>Copy<\/button>/);
  });

  it('draws full-size charts for the revisions that serve', () => {
    const charts = Array.from(html.matchAll(/<svg width="100%" height="(\d+)"/g)).map(m => Number(m[1]));
    expect(charts).toEqual([92, 92, 92, 92, 92, 92]); // two revisions × three series, 90 px high
    expect(html).toContain('peak 2.00/s');
  });

  it('lists every revision in the table, idle ones too, newest first', () => {
    const rows = Array.from(html.matchAll(/<tr data-revision="(\d+)">/g)).map(m => m[1]);
    expect(rows).toEqual(['2', '1', '0']);
    expect(html).toContain('<td>canary</td><td>20%</td>');
    expect(html).toContain('models/old');
  });

  it('has the actions of the panel', () => {
    const labels = Array.from(html.matchAll(/data-action="([a-z]+)"/g)).map(m => m[1]);
    expect(labels).toEqual(['promote', 'rollback', 'traffic', 'scale', 'delete']);
  });

  it('has one tab per deployment', () => {
    expect(deploymentViewId({ team: 'vision', name: 'iris' })).toBe('gpuhub-deployment-vision-iris');
  });
});
