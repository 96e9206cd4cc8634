/** The submit form's datasets: a checkbox each, what it is, and why the chosen team or pool would be refused it. */
import * as React from 'react';

import { IDatasetChoice } from '../submission';

export function DatasetPicker(props: {
  choices: IDatasetChoice[];
  chosen: string[];
  invalid: boolean;
  onChange: (chosen: string[]) => void;
}): JSX.Element | null {
  if (!props.choices.length) {
    return null;
  }
  const toggle = (name: string, on: boolean) =>
    props.onChange(on ? [...props.chosen, name] : props.chosen.filter(d => d !== name));
  // Not a Field: its <label> would tick the first box whichever name is clicked.
  return (
    <div className={`gpuhub-Field gpuhub-SubmitForm-datasets${props.invalid ? ' gpuhub-Field-invalid' : ''}`} data-field="datasets">
      <span className="gpuhub-Field-label">Datasets</span>
      {props.choices.map(d => (
        <label key={d.name} className="gpuhub-SubmitForm-dataset" data-dataset={d.name}>
          <input
            type="checkbox"
            name="datasets"
            value={d.name}
            checked={props.chosen.includes(d.name)}
            onChange={e => toggle(d.name, e.target.checked)}
          />{' '}
          <b>{d.name}</b> <span className="gpuhub-Field-hint">{d.about}</span>
          {d.refusal && <span className="gpuhub-Field-problem"> {d.refusal}</span>}
        </label>
      ))}
      <span className="gpuhub-Field-hint">each read-only at /datasets/NAME ($GPUHUB_DATASETS_DIR)</span>
    </div>
  );
}
