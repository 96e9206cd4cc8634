/** A labelled field of a form, marked when invalid, with its problem (or a hint) under it. */
import * as React from 'react';

export function Field(props: {
  label: string;
  name: string;
  /** Marked without a message of its own (the form's banner says why). */
  invalid?: boolean;
  /** What is wrong, shown under the field instead of the hint. */
  problem?: string;
  hint?: string;
  children: React.ReactNode;
}): JSX.Element {
  const invalid = props.invalid || !!props.problem;
  return (
    <label className={`gpuhub-Field${invalid ? ' gpuhub-Field-invalid' : ''}`} data-field={props.name}>
      <span className="gpuhub-Field-label">{props.label}</span>
      {props.children}
      {props.problem ? (
        <span className="gpuhub-Field-problem">{props.problem}</span>
      ) : (
        props.hint && <span className="gpuhub-Field-hint">{props.hint}</span>
      )}
    </label>
  );
}
