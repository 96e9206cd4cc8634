/**
 * Sparklines of a revision's metrics: the values of one series from the
 * metrics points, and the SVG path that draws them. Pure. Buckets without
 * requests have no latency nor error rate: they are gaps in the line, not
 * zeros, so a quiet minute does not read as a fast one.
 */
import { IMetricPoint } from './types';

export type Series = 'rps' | 'p99_ms' | 'error_rate';

/**
 * The series' values, oldest first; null where the bucket had no requests
 * to measure. The newest bucket is the one still filling (it ends after
 * now): left out, or every chart would end in a drop.
 */
export function seriesValues(points: IMetricPoint[], series: Series): (number | null)[] {
  return points.slice(0, -1).map(p => {
    if (series === 'rps') {
      return p.rps ?? 0;
    }
    const value = p[series];
    return p.requests > 0 && typeof value === 'number' ? value : null;
  });
}

/** The fewest points a chart spans (one minute), however young the deployment. */
export const MIN_CHART_POINTS = 12;

/**
 * The revisions' points from the first bucket in which any of them was
 * seen (a replica sampled or a request served): a deployment younger than
 * the metrics' window gets charts of its life, not mostly empty ones. All
 * revisions lose the same buckets, so their charts stay aligned in time.
 */
export function chartWindow(revisions: Record<string, IMetricPoint[]>): Record<string, IMetricPoint[]> {
  const series = Object.values(revisions);
  const length = Math.max(0, ...series.map(points => points.length));
  const seen = (p: IMetricPoint) => p.requests > 0 || (p.ready_replicas ?? null) !== null;
  const firsts = series.map(points => points.findIndex(seen)).filter(i => i >= 0);
  const first = firsts.length ? Math.min(...firsts) : length;
  const start = Math.max(0, Math.min(first, length - MIN_CHART_POINTS));
  return Object.fromEntries(Object.entries(revisions).map(([rev, points]) => [rev, points.slice(start)]));
}

export interface ISparkline {
  /** The SVG path ("M x y L x y …", one subpath per run of values). */
  path: string;
  /** The value at the top of the box. */
  top: number;
  /** The largest value (0 when there is none). */
  peak: number;
  /** The newest value that is not a gap, or null. */
  last: number | null;
}

function coordinate(n: number): string {
  return String(Math.round(n * 10) / 10);
}

/**
 * The path of `values` in a `width` × `height` box: x spreads the points
 * evenly (oldest left), y runs from 0 at the bottom to the largest value
 * (at least `minTop`, so a flat line near zero stays near the bottom) at
 * the top. A gap (null) ends a subpath; a lone value between gaps is a
 * zero-length subpath, which a round line cap draws as a dot.
 */
export function sparkline(
  values: (number | null)[],
  width: number,
  height: number,
  minTop = 0
): ISparkline {
  const present = values.filter((v): v is number => v !== null);
  const peak = Math.max(0, ...present);
  const top = Math.max(minTop, peak) || 1;
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const parts: string[] = [];
  let drawing = false;
  values.forEach((v, i) => {
    if (v === null) {
      drawing = false;
      return;
    }
    const x = coordinate(values.length > 1 ? i * step : width);
    const y = coordinate(height - (Math.min(v, top) / top) * height);
    parts.push(`${drawing ? 'L' : 'M'}${x} ${y}`);
    const next = values[i + 1];
    if (!drawing && (next === null || next === undefined)) {
      parts.push('h0'); // a lone point
    }
    drawing = true;
  });
  return { path: parts.join(' '), top, peak, last: present.length ? present[present.length - 1] : null };
}
