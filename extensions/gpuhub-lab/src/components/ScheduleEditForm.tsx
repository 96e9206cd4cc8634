/** The Schedules list's "Edit…" dialog body: name, cron expression (in words as it is typed), time zone, catch-up. */
import * as React from 'react';

import { describeCron } from '../cron';
import { IScheduleEditValues, ScheduleEditField, ScheduleEditProblems } from '../scheduleedit';
import { Field } from './Field';

export interface IScheduleEditProps {
  initial: IScheduleEditValues;
  /** From the last try: the form's own or the service's, by field. */
  problems: ScheduleEditProblems;
  /** A refusal that names no field of the form. */
  error: string;
  onChange: (values: IScheduleEditValues) => void;
}

export function ScheduleEditForm(props: IScheduleEditProps): JSX.Element {
  const [values, setValues] = React.useState<IScheduleEditValues>(props.initial);
  const set = (key: ScheduleEditField) => (e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement>) => {
    const next = { ...values, [key]: e.target.value };
    setValues(next);
    props.onChange(next);
  };
  const cron = values.cron.trim();
  const words = cron ? describeCron(cron.replace(/\s+/g, ' ')) : '';
  return (
    <form className="gpuhub-ScheduleEdit" onSubmit={e => e.preventDefault()}>
      {props.error && <div className="gpuhub-SubmitForm-error">{props.error}</div>}
      <div className="gpuhub-SubmitForm-row">
        <Field label="Name" name="name" problem={props.problems.name}>
          <input className="jp-mod-styled" name="name" value={values.name} onChange={set('name')} autoComplete="off" />
        </Field>
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field
          label="Cron expression"
          name="cron"
          problem={props.problems.cron}
          hint={words && words !== cron ? words : 'minute hour day-of-month month day-of-week'}
        >
          <input className="jp-mod-styled" name="cron" value={values.cron} onChange={set('cron')} spellCheck={false} />
        </Field>
        <Field label="Time zone" name="timezone" problem={props.problems.timezone} hint="e.g. UTC, Europe/Paris">
          <input className="jp-mod-styled" name="timezone" value={values.timezone} onChange={set('timezone')} />
        </Field>
        <Field
          label="Missed firings"
          name="catchUp"
          problem={props.problems.catchUp}
          hint="while the service was down: run once when it is back, or skip them"
        >
          <select className="jp-mod-styled" name="catchUp" value={values.catchUp} onChange={set('catchUp')}>
            <option value="once">run once</option>
            <option value="skip">skip</option>
          </select>
        </Field>
      </div>
    </form>
  );
}
