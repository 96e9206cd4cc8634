import { chartWindow, MIN_CHART_POINTS, seriesValues, sparkline } from '../src/sparkline';
import { IMetricPoint } from '../src/types';

function point(
  requests: number,
  rps: number,
  p99: number | null,
  errors: number | null = 0,
  ready: number | null = 1
): IMetricPoint {
  return {
    t: '2026-11-30T03:10:05Z',
    requests,
    rps,
    error_rate: errors,
    p50_ms: p99,
    p99_ms: p99,
    ready_replicas: ready,
    in_flight: ready === null ? null : 0
  };
}

describe('the series of a revision', () => {
  // The last bucket is still filling: it is left out.
  const points = [point(10, 2, 20), point(0, 0, null), point(5, 1, 40, 0.2), point(1, 0.2, 5)];

  it('counts quiet buckets as 0 requests per second', () => {
    expect(seriesValues(points, 'rps')).toEqual([2, 0, 1]);
  });

  it('leaves latency and error rate out (null) where nothing was measured', () => {
    expect(seriesValues(points, 'p99_ms')).toEqual([20, null, 40]);
    // an empty bucket's error rate is no measurement, even if it says 0
    expect(seriesValues(points, 'error_rate')).toEqual([0, null, 0.2]);
  });

  it('is empty before a bucket is complete', () => {
    expect(seriesValues([point(3, 0.6, 12)], 'rps')).toEqual([]);
  });
});

describe('sparkline geometry', () => {
  it('spreads the points over the width and scales the largest to the top', () => {
    const line = sparkline([0, 5, 10], 100, 20);
    expect(line.path).toBe('M0 20 L50 10 L100 0');
    expect([line.top, line.peak, line.last]).toEqual([10, 10, 10]);
  });

  it('breaks the line at gaps, and draws a lone point as a dot', () => {
    const line = sparkline([1, 2, null, 4, null, null, 3, 4], 70, 10);
    expect(line.path).toBe('M0 7.5 L10 5 M30 0 h0 M60 2.5 L70 0');
    expect(line.last).toBe(4);
  });

  it('keeps a flat line near zero at the bottom with a minimum top', () => {
    expect(sparkline([0.01, 0.02], 10, 10, 1).path).toBe('M0 9.9 L10 9.8');
    expect(sparkline([0, 0], 10, 10).path).toBe('M0 10 L10 10');
  });

  it('draws nothing for no measurements at all', () => {
    expect(sparkline([null, null], 10, 10)).toEqual({ path: '', top: 1, peak: 0, last: null });
    expect(sparkline([], 10, 10).path).toBe('');
  });

  it('puts a single point at the right edge (the newest)', () => {
    expect(sparkline([3], 50, 10).path).toBe('M50 0 h0');
  });
});

describe('the window of the charts', () => {
  const unseen = () => point(0, 0, null, 0, null);
  const window = (n: number, firstSeen: number) =>
    Array.from({ length: n }, (_, i) => (i < firstSeen ? unseen() : point(0, 0, null)));

  it('starts where the oldest revision was first seen, for all revisions alike', () => {
    const cut = chartWindow({ '1': window(120, 60), '2': window(120, 100) });
    expect([cut['1'].length, cut['2'].length]).toEqual([60, 60]);
    expect(cut['1'][0].ready_replicas).toBe(1);
  });

  it('spans at least a minute for a deployment just made', () => {
    expect(chartWindow({ '1': window(120, 118) })['1']).toHaveLength(MIN_CHART_POINTS);
    expect(chartWindow({ '1': window(5, 4) })['1']).toHaveLength(5);
  });

  it('counts a request as seen even before a replica was sampled', () => {
    const points = window(120, 120);
    points[30] = point(2, 0.4, 10, 0, null);
    expect(chartWindow({ '1': points })['1']).toHaveLength(90);
  });
});
