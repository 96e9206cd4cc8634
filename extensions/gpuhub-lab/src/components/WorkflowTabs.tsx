/**
 * The Submit dialog's Sweep tab (a grid editor over the notebook's
 * parameters cell, "N tasks" as one types, a cap on how many run at once,
 * the metric to compare them by) and Schedule tab (cron shortcuts, the
 * expression they make, the time zone).
 */
import { HTMLSelect } from '@jupyterlab/ui-components';
import * as React from 'react';

import { CRON_KINDS, WEEKDAYS } from '../cron';
import { IFormValues } from '../submission';
import { MAX_TASKS } from '../sweep';
import { IParameter } from '../types';
import { cronPreview, taskSummary } from '../workflowform';
import { Field } from './Field';

export interface ITabProps {
  values: IFormValues;
  set: (patch: Partial<IFormValues>) => void;
  /** The field at fault and why (the form's check or the service's). */
  error: { field?: string; message: string } | null;
}

const problemOf = (error: ITabProps['error'], field: string) =>
  error?.field === field ? error.message : undefined;

const text = (props: ITabProps, key: keyof IFormValues) => ({
  name: key,
  className: 'jp-mod-styled',
  value: props.values[key] as string,
  onChange: (e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>) =>
    props.set({ [key]: e.target.value } as Partial<IFormValues>)
});

export function SweepTab(props: ITabProps & { params: IParameter[] }): JSX.Element {
  const { values, set, error, params } = props;
  const summary = taskSummary(values, params);
  const setValues = (name: string, v: string) => set({ sweepValues: { ...values.sweepValues, [name]: v } });
  const tooMany = summary.count > MAX_TASKS;
  return (
    <div className="gpuhub-SweepTab">
      {params.length ? (
        <table className="gpuhub-SweepGrid">
          <thead>
            <tr>
              <th>Parameter</th>
              <th>Default</th>
              <th>Values (comma-separated; empty: the default)</th>
            </tr>
          </thead>
          <tbody>
            {params.map(p => {
              const problem = problemOf(error, `sweepValues.${p.name}`);
              return (
                <tr key={p.name} data-param={p.name} className={problem ? 'gpuhub-Field-invalid' : ''}>
                  <td>
                    <code>{p.name}</code>
                  </td>
                  <td title={p.type ? `${p.type}: values are read as this type` : ''}>
                    <code>{p.default}</code>
                  </td>
                  <td>
                    <input
                      className="jp-mod-styled"
                      name={`sweep-${p.name}`}
                      value={values.sweepValues[p.name] ?? ''}
                      placeholder={p.default}
                      onChange={e => setValues(p.name, e.target.value)}
                    />
                    {problem && <span className="gpuhub-Field-problem">{problem}</span>}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      ) : (
        <Field
          label="Parameter grid"
          name="sweepLines"
          problem={problemOf(error, 'sweepLines')}
          hint="name = value, value, … per line; each task gets --name=value"
        >
          <textarea rows={4} {...text(props, 'sweepLines')} />
        </Field>
      )}
      <div
        className={`gpuhub-SweepCount${summary.problem || tooMany ? ' gpuhub-mod-problem' : ''}`}
        data-field="sweepValues"
      >
        {summary.problem ||
          (tooMany
            ? `${summary.count} tasks: more than the ${MAX_TASKS} a sweep may have`
            : `${summary.count} task${summary.count === 1 ? '' : 's'}`)}
        {!summary.problem && problemOf(error, 'sweepValues') && (
          <span className="gpuhub-Field-problem">{problemOf(error, 'sweepValues')}</span>
        )}
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field label="Max running" name="maxRunning" problem={problemOf(error, 'maxRunning')} hint="tasks at once (empty: as many as the quota allows)">
          <input type="number" min={1} placeholder="no cap" {...text(props, 'maxRunning')} />
        </Field>
        <Field label="Metric" name="metricName" problem={problemOf(error, 'metricName')} hint="a scrapbook glue name or a key of metrics.json">
          <input placeholder="e.g. accuracy" {...text(props, 'metricName')} />
        </Field>
        <Field label="Best is" name="metricGoal">
          <HTMLSelect
            {...text(props, 'metricGoal')}
            options={[
              { value: 'max', label: 'highest' },
              { value: 'min', label: 'lowest' }
            ]}
          />
        </Field>
      </div>
    </div>
  );
}

/** The IANA time zones the browser knows (for the time zone's suggestions). */
function timezones(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (key: string) => string[] };
  return intl.supportedValuesOf ? intl.supportedValuesOf('timeZone') : [];
}

export function ScheduleTab(props: ITabProps): JSX.Element {
  const { values, error } = props;
  const kind = values.cronKind;
  const preview = cronPreview(values);
  const zones = React.useMemo(timezones, []);
  return (
    <div className="gpuhub-ScheduleTab">
      <div className="gpuhub-SubmitForm-row">
        <Field label="Schedule name" name="scheduleName" problem={problemOf(error, 'scheduleName')}>
          <input placeholder="the job's name" {...text(props, 'scheduleName')} />
        </Field>
        <Field label="Repeat" name="cronKind">
          <HTMLSelect {...text(props, 'cronKind')} options={CRON_KINDS.map(k => ({ value: k.kind, label: k.label }))} />
        </Field>
        {kind === 'hourly' && (
          <Field label="Minute" name="cronMinute" problem={problemOf(error, 'cronMinute')} hint="past the hour">
            <input type="number" min={0} max={59} {...text(props, 'cronMinute')} />
          </Field>
        )}
        {kind === 'weekly' && (
          <Field label="On" name="cronWeekday">
            <HTMLSelect {...text(props, 'cronWeekday')} options={WEEKDAYS.map((d, i) => ({ value: String(i), label: d }))} />
          </Field>
        )}
        {(kind === 'daily' || kind === 'weekdays' || kind === 'weekly') && (
          <Field label="At" name="cronTime" problem={problemOf(error, 'cronTime')} hint="HH:MM">
            <input type="time" {...text(props, 'cronTime')} />
          </Field>
        )}
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field
          label="Cron expression"
          name="cronCustom"
          problem={problemOf(error, 'cronCustom')}
          hint="minute hour day-of-month month day-of-week (or @hourly, @daily, …)"
        >
          {kind === 'custom' ? (
            <input placeholder="*/15 * * * *" {...text(props, 'cronCustom')} />
          ) : (
            <input className="jp-mod-styled" name="cronCustom" value={preview} readOnly />
          )}
        </Field>
        <Field label="Time zone" name="timezone" problem={problemOf(error, 'timezone')} hint="the schedule's clock (default: this browser's)">
          <input list="gpuhub-timezones" {...text(props, 'timezone')} />
        </Field>
        <datalist id="gpuhub-timezones">
          {zones.map(z => (
            <option key={z} value={z} />
          ))}
        </datalist>
      </div>
    </div>
  );
}
