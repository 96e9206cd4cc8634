/** A small live chart of one series of a revision (inline SVG), with its latest value. */
import * as React from 'react';

import { duration } from '../format';
import { seriesValues, Series, sparkline } from '../sparkline';
import { IMetricPoint } from '../types';

// The geometry's box; the chart is drawn as wide as its column.
const WIDTH = 100;
const SMALL = 18;

export function Sparkline(props: {
  points: IMetricPoint[];
  series: Series;
  label: string;
  format: (value: number) => string;
  /** The smallest top of the scale (a flat line near 0 stays near the bottom). */
  minTop?: number;
  /** Pixels (the panel's small charts: 18; a deployment's tab draws them larger). */
  height?: number;
}): JSX.Element {
  const height = props.height ?? SMALL;
  const values = seriesValues(props.points, props.series);
  const line = sparkline(values, WIDTH, height, props.minTop);
  const latest = line.last === null ? '–' : props.format(line.last);
  const title = `${props.label} per 5 s over the last ${duration(values.length * 5)}: latest ${latest}, peak ${props.format(line.peak)}`;
  return (
    <span className="gpuhub-Spark" data-series={props.series} title={title}>
      <span className="gpuhub-Spark-label">{props.label}</span>
      <span className="gpuhub-Spark-value">{latest}</span>
      {props.height && <span className="gpuhub-Spark-peak">peak {props.format(line.peak)}</span>}
      {/* Stretched to the panel's width; the stroke keeps its width. */}
      <svg
        width="100%"
        height={height + 2}
        viewBox={`0 -1 ${WIDTH} ${height + 2}`}
        preserveAspectRatio="none"
        data-peak={line.peak}
        data-points={values.length}
      >
        <path
          d={line.path}
          fill="none"
          strokeWidth={1.5}
          strokeLinecap="round"
          strokeLinejoin="round"
          vectorEffect="non-scaling-stroke"
        />
      </svg>
    </span>
  );
}
