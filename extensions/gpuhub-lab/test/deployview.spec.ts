import {
  actionStates,
  DialogError,
  isStarting,
  latencyText,
  listedRevisions,
  parseScale,
  parseTraffic,
  percentText,
  revisionRole,
  revisionStatus,
  trafficSegments
} from '../src/deployview';
import { deployment, revision, withCanary } from './fixtures';

describe('the traffic bar', () => {
  it('lays the revisions that get traffic side by side, oldest first', () => {
    expect(trafficSegments(withCanary())).toEqual([
      { revision: 1, percent: 80, offset: 0, role: 'stable' },
      { revision: 2, percent: 20, offset: 80, role: 'canary' }
    ]);
  });

  it('leaves out revisions at 0 %, and marks the roles as the service names them', () => {
    const d = deployment({
      traffic: { '3': 50, '1': 0, '2': 50 },
      stable_revision: 2,
      canary_revision: 3,
      revisions: [1, 2, 3].map(n => revision({ number: n }))
    });
    expect(trafficSegments(d).map(s => [s.revision, s.offset, s.role])).toEqual([
      [2, 0, 'stable'],
      [3, 50, 'canary']
    ]);
    expect(revisionRole({ ...d, canary_revision: null }, 3)).toBe('other');
    expect(revisionRole(d, 1)).toBe('idle');
  });
});

describe('the actions a deployment offers', () => {
  const enabled = (d: ReturnType<typeof deployment>) =>
    actionStates(d)
      .filter(a => a.enabled)
      .map(a => a.action);

  it('a single revision: scale and delete only', () => {
    expect(enabled(deployment())).toEqual(['scale', 'delete']);
    const promote = actionStates(deployment()).find(a => a.action === 'promote');
    expect(promote?.title).toBe('No canary to promote');
  });

  it('with a canary: promote it, or roll back to the stable revision', () => {
    const states = actionStates(withCanary());
    expect(states.filter(a => a.enabled).map(a => a.action)).toEqual([
      'promote',
      'rollback',
      'traffic',
      'scale',
      'delete'
    ]);
    expect(states[0].title).toBe('Give revision 2 all traffic');
    expect(states[1].title).toBe('Send all traffic back to revision 1');
  });

  it('after a promotion: roll back to the revision before', () => {
    const d = deployment({
      traffic: { '2': 100 },
      stable_revision: 2,
      revisions: [revision(), revision({ number: 2 })]
    });
    expect(enabled(d)).toEqual(['rollback', 'traffic', 'scale', 'delete']);
    expect(actionStates(d)[1].title).toBe('Send all traffic back to revision 1');
  });
});

describe('what the numbers say', () => {
  it('latency, error rate', () => {
    expect([latencyText(null), latencyText(3.14), latencyText(42.4), latencyText(1234)]).toEqual([
      '–',
      '3.1 ms',
      '42 ms',
      '1.2 s'
    ]);
    expect([percentText(0), percentText(0.025), percentText(0.5)]).toEqual(['0 %', '2.5 %', '50 %']);
  });

  it('a revision with traffic and no ready replica is starting', () => {
    expect(isStarting(deployment({ revisions: [revision({ ready_replicas: 0 })] }))).toBe(true);
    expect(isStarting(withCanary())).toBe(false);
  });
});

describe('the traffic and scale dialogs', () => {
  it('read percents that add up to 100 (empty is 0)', () => {
    expect(parseTraffic({ '1': '70', '2': '30', '3': '' })).toEqual({ '1': 70, '2': 30, '3': 0 });
    expect(() => parseTraffic({ '1': '70', '2': '20' })).toThrow('add up to 90, not 100');
    expect(() => parseTraffic({ '1': '50.5', '2': '49.5' })).toThrow(DialogError);
  });

  it('read a replica range', () => {
    expect(parseScale('1', ' 3 ')).toEqual({ min_replicas: 1, max_replicas: 3 });
    expect(() => parseScale('3', '2')).toThrow('below the minimum');
    expect(() => parseScale('', '2')).toThrow('minimum');
    // down to zero replicas: with the idle time before the last one stops
    expect(parseScale('0', '2', '120')).toEqual({ min_replicas: 0, max_replicas: 2, scale_to_zero_after: 120 });
    expect(parseScale('1', '2', '120')).toEqual({ min_replicas: 1, max_replicas: 2 });
    expect(() => parseScale('0', '2', '5')).toThrow('scale to zero after');
  });
});

describe("a revision's state, as the panel words it", () => {
  const waiting = revision({
    number: 2,
    state: 'waiting',
    reason: 'waiting for w0123456789ab (ok)',
    replicas: [],
    ready_replicas: 0
  });
  // [what the revision is, in which deployment, phase, words]
  const cases: [string, ReturnType<typeof deployment>, number, string, string][] = [
    ['waiting for its job', deployment({ revisions: [revision(), waiting] }), 2, 'waiting', 'waiting for w0123456789ab (ok)'],
    [
      'failed: its job failed',
      deployment({ revisions: [revision(), revision({ number: 2, state: 'failed', reason: 'w0123456789ab failed', replicas: [] })] }),
      2,
      'failed',
      'failed: w0123456789ab failed'
    ],
    [
      'cancelled by its owner',
      deployment({ revisions: [revision(), revision({ number: 2, state: 'cancelled', reason: 'cancelled by alice', replicas: [] })] }),
      2,
      'cancelled',
      'cancelled by alice'
    ],
    ['serving, with a ready replica', deployment(), 1, 'serving', 'serving'],
    [
      'rolling out: traffic, no ready replica yet',
      deployment({ revisions: [revision({ ready_replicas: 0 })] }),
      1,
      'rolling out',
      'rolling out: 0/1 replicas ready'
    ],
    [
      'scaled to zero while idle',
      deployment({ min_replicas: 0, revisions: [revision({ replicas: [], ready_replicas: 0 })] }),
      1,
      'serving',
      'serving (no replica while idle)'
    ],
    ['an old revision without traffic', deployment({ revisions: [revision({ number: 0, replicas: [] }), revision()] }), 0, 'idle', 'no traffic']
  ];
  it.each(cases)('%s', (_what, d, number, phase, text) => {
    const r = d.revisions.find(x => x.number === number)!;
    expect(revisionStatus(d, r)).toEqual({ phase, text });
  });

  it('a card lists a waiting revision and a newest one that never deployed, not old idle ones', () => {
    const d = deployment({
      revisions: [
        revision({ number: 0, replicas: [] }),
        revision(),
        revision({ number: 2, state: 'cancelled', reason: 'cancelled by alice', replicas: [] }),
        revision({ number: 3, state: 'waiting', reason: 'waiting for s0123456789ab (ok)', replicas: [] })
      ]
    });
    expect(listedRevisions(d).map(r => r.number)).toEqual([3, 1]);
    d.revisions.pop();
    expect(listedRevisions(d).map(r => r.number)).toEqual([2, 1]);
  });

  it('a waiting revision takes no traffic: no traffic dialog, no rollback to it', () => {
    const d = deployment({ revisions: [revision(), revision({ number: 2, state: 'waiting', replicas: [] })] });
    const traffic = actionStates(d).find(a => a.action === 'traffic');
    expect(traffic).toEqual({ action: 'traffic', enabled: false, title: 'Only one revision' });
  });
});
