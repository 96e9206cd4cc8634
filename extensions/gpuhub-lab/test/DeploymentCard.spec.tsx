import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { DeploymentCard, IDeploymentActions } from '../src/components/DeploymentCard';
import { IMetricPoint } from '../src/types';
import { deployment, revision, withCanary } from './fixtures';

const actions: IDeploymentActions = { copyEndpoint: () => undefined, run: () => undefined, open: () => undefined };
const URL = 'http://hub/services/gpuhub/endpoints/vision/iris/v2/models/iris/infer';

function card(d = withCanary(), points: Record<string, IMetricPoint[]> = {}, error = ''): string {
  return renderToStaticMarkup(
    <DeploymentCard d={d} endpointUrl={URL} points={points} error={error} actions={actions} />
  );
}

/** The action buttons: label and whether they can be clicked. */
function buttons(html: string): [string, boolean][] {
  return Array.from(html.matchAll(/<button[^>]*data-action="[^"]*"([^>]*)>([^<]*)<\/button>/g)).map(m => [
    m[2],
    !m[1].includes('disabled')
  ]);
}

/** The revisions listed, in order. */
function revisions(html: string): string[] {
  return Array.from(html.matchAll(/<li class="gpuhub-Revision [^"]*" data-revision="(\d+)"/g)).map(m => m[1]);
}

describe('a deployment in the Deployments panel', () => {
  it('shows the endpoint, the split and the canary first, with every action', () => {
    const html = card();
    expect(html).toContain(URL);
    expect(html).toContain('style="left:0%;width:80%"');
    expect(html).toContain('style="left:80%;width:20%"');
    expect(revisions(html)).toEqual(['2', '1']);
    expect(buttons(html).filter(([, on]) => on).map(([label]) => label)).toEqual([
      'Promote',
      'Roll back',
      'Traffic…',
      'Scale…',
      'Delete…'
    ]);
  });

  it('offers no promotion without a canary, and sums up old revisions without traffic', () => {
    const d = deployment({
      traffic: { '3': 100 },
      stable_revision: 3,
      revisions: [1, 2, 3].map(n => revision({ number: n, replicas: n === 3 ? ['w3'] : [] }))
    });
    const html = card(d);
    expect(buttons(html)).toContainEqual(['Promote', false]);
    expect(buttons(html)).toContainEqual(['Roll back', true]);
    expect(html).toContain('2 older revisions without traffic');
    expect(revisions(html)).toEqual(['3']);
  });

  it('draws charts only once there are metrics, and shows a refused action', () => {
    expect(card()).not.toContain('gpuhub-Spark');
    const point: IMetricPoint = {
      t: '2026-11-30T03:10:05Z',
      requests: 5,
      rps: 1,
      error_rate: 0,
      p50_ms: 8,
      p99_ms: 12,
      ready_replicas: 1,
      in_flight: 0
    };
    const html = card(withCanary(), { '1': [point, point, point] }, 'scale: min_replicas: 0 needs scale_to_zero_after');
    expect(html.match(/class="gpuhub-Spark"/g)).toHaveLength(3);
    expect(html).toContain('data-peak="1"');
    expect(html).toContain('0 needs scale_to_zero_after');
  });
});
