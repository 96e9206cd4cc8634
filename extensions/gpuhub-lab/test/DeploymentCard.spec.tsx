import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { DeploymentCard, IDeploymentActions } from '../src/components/DeploymentCard';
import { IMetricPoint } from '../src/types';
import { deployment, revision, withCanary } from './fixtures';

const actions: IDeploymentActions = {
  copyEndpoint: () => undefined,
  run: () => undefined,
  open: () => undefined,
  cancelRevision: () => undefined
};
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

describe("a revision's state on its card", () => {
  it('shows a waiting revision with what it waits for and a Cancel button, the serving one as serving', () => {
    const d = deployment({
      message: 'revision 2 is waiting for w0123456789ab (ok)',
      revisions: [
        revision(),
        revision({ number: 2, state: 'waiting', reason: 'waiting for w0123456789ab (ok)', replicas: [], ready_replicas: 0 })
      ]
    });
    const html = card(d);
    expect(revisions(html)).toEqual(['2', '1']);
    expect(html).toContain('data-phase="waiting"');
    expect(html).toContain('waiting for w0123456789ab (ok)');
    expect(html).toMatch(/<button[^>]*gpuhub-Revision-cancel[^>]*data-revision="2"[^>]*>Cancel revision<\/button>/);
    expect(html).toContain('data-phase="serving"');
    expect(html.match(/Cancel revision<\/button>/g)).toHaveLength(1); // the serving one has none
    // A waiting revision 1 of a new deployment is not called "stable".
    const fresh = card(deployment({ traffic: {}, revisions: [revision({ state: 'waiting', reason: 'waiting', replicas: [], ready_replicas: 0 })] }));
    expect(fresh).not.toContain('gpuhub-Revision-role');
  });

  it('shows a failed newest revision with why, and no Cancel button', () => {
    const d = deployment({
      revisions: [revision(), revision({ number: 2, state: 'failed', reason: "model_dir: 'models/best' is not a directory", replicas: [] })]
    });
    const html = card(d);
    expect(html).toContain('data-phase="failed"');
    expect(html).toContain('failed: model_dir: &#x27;models/best&#x27; is not a directory');
    expect(html).not.toContain('Cancel revision');
  });
});
