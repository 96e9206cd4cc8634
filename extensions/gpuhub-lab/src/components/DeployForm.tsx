/**
 * The "Deploy model" form: name (checked as it is typed), team, model
 * folder, runtime, GPUs and pool, replicas; for a name that is already a
 * deployment, the new revision's canary share and automatic rollback.
 * Problems show next to the field they are about.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import {
  checkDeployForm,
  DeployField,
  existingDeployment,
  FieldProblems,
  IDeployFormValues,
  RUNTIMES,
  withDeploymentSettings
} from '../deployform';
import { IDeployment, IPool, ITeam } from '../types';
import { Field } from './Field';

export interface IDeployFormProps {
  initial: IDeployFormValues;
  teams: ITeam[];
  pools: IPool[];
  deployments: IDeployment[];
  /** From the last try: the form's own or the service's, by field. */
  problems: FieldProblems;
  /** A refusal that names no field of the form. */
  error: string;
  onChange: (values: IDeployFormValues) => void;
}

/** Fields whose values come from the deployment when the name is one. */
const DEPLOYMENT_SETTINGS: DeployField[] = ['pool', 'gpus', 'minReplicas', 'maxReplicas', 'scaleToZeroAfter'];

export function DeployForm(props: IDeployFormProps): JSX.Element {
  const [values, setValues] = React.useState<IDeployFormValues>(props.initial);
  const [touched, setTouched] = React.useState<Set<DeployField>>(new Set());
  const existing = existingDeployment(values, props.deployments);
  const live = checkDeployForm(values, existing).problems;
  // A field the user changed shows its live check; others what the last try said.
  const problem = (key: DeployField) => (touched.has(key) ? live[key] : props.problems[key]);

  const set = (key: DeployField, value: string | boolean) => {
    let next = { ...values, [key]: value };
    const now = new Set(touched).add(key);
    const found = existingDeployment(next, props.deployments);
    if ((key === 'name' || key === 'team') && found && !DEPLOYMENT_SETTINGS.some(k => touched.has(k))) {
      next = withDeploymentSettings(next, found);
    }
    setValues(next);
    setTouched(now);
    props.onChange(next);
  };
  const update = (key: DeployField) => (
    e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement>
  ) => set(key, e.target.type === 'checkbox' ? (e.target as HTMLInputElement).checked : e.target.value);
  const input = (key: DeployField, extra: React.InputHTMLAttributes<HTMLInputElement> = {}) => (
    <input className="jp-mod-styled" name={key} value={values[key] as string} onChange={update(key)} {...extra} />
  );
  const select = (key: DeployField, options: string[]) => (
    <select className="jp-mod-styled" name={key} value={values[key] as string} onChange={update(key)}>
      {options.map(o => (
        <option key={o} value={o}>
          {o}
        </option>
      ))}
    </select>
  );
  const pools = Array.from(new Set([...props.pools.map(p => p.name), ...(values.pool ? [values.pool] : [])]));
  const nextRevision = existing ? Math.max(...existing.revisions.map(r => r.number)) + 1 : 1;

  return (
    <form className="gpuhub-DeployForm" onSubmit={e => e.preventDefault()}>
      {props.error && <div className="gpuhub-SubmitForm-error">{props.error}</div>}
      <div className="gpuhub-SubmitForm-row">
        <Field label="Name" name="name" problem={problem('name')} hint="lowercase letters, digits, '-'; part of the endpoint">
          {input('name', { autoComplete: 'off', spellCheck: false })}
        </Field>
        <Field label="Team" name="team" problem={problem('team')}>
          {select('team', props.teams.map(t => t.name))}
        </Field>
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field label="Model folder" name="modelDir" problem={problem('modelDir')} hint="a folder of your files">
          {input('modelDir')}
        </Field>
        <Field label="Runtime" name="runtime" problem={problem('runtime')} hint={values.runtime === 'sklearn' ? 'loads model.joblib' : 'your class'}>
          {select('runtime', RUNTIMES)}
        </Field>
        {values.runtime === 'predictor' && (
          <Field label="Predictor" name="predictor" problem={problem('predictor')} hint="file.py:Class in the folder">
            {input('predictor')}
          </Field>
        )}
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field label="GPUs per replica" name="gpus" problem={problem('gpus')}>
          {input('gpus', { type: 'number', min: 0, max: 16 })}
        </Field>
        <Field label="Pool" name="pool" problem={problem('pool')}>
          {select('pool', pools)}
        </Field>
        <Field label="Min replicas" name="minReplicas" problem={problem('minReplicas')}>
          {input('minReplicas', { type: 'number', min: 0, max: 64 })}
        </Field>
        <Field label="Max replicas" name="maxReplicas" problem={problem('maxReplicas')} hint="scales with requests in flight">
          {input('maxReplicas', { type: 'number', min: 1, max: 64 })}
        </Field>
        {values.minReplicas.trim() === '0' && (
          <Field
            label="Scale to zero after (s)"
            name="scaleToZeroAfter"
            problem={problem('scaleToZeroAfter')}
            hint="idle seconds; the next request waits for a replica"
          >
            {input('scaleToZeroAfter', { type: 'number', min: 10, max: 604800 })}
          </Field>
        )}
      </div>
      {existing && (
        <fieldset className="gpuhub-DeployForm-revision" data-next-revision={nextRevision}>
          <legend>
            {existing.team}/{existing.name} exists: this is its revision {nextRevision}
          </legend>
          <label className="gpuhub-DeployForm-canary">
            <input type="checkbox" name="asCanary" checked={values.asCanary} onChange={update('asCanary')} />
            as a canary with
            {input('canaryPercent', { type: 'number', min: 1, max: 99, disabled: !values.asCanary })}% of the
            requests (else it takes all of them)
          </label>
          {problem('canaryPercent') && <span className="gpuhub-Field-problem">{problem('canaryPercent')}</span>}
          {values.asCanary && (
            <div className="gpuhub-SubmitForm-row">
              <Field label="Roll back above error rate (%)" name="rollbackErrorPercent" problem={problem('rollbackErrorPercent')} hint="over the last minute; empty: no rule">
                {input('rollbackErrorPercent', { placeholder: 'none' })}
              </Field>
              <Field label="… or above p99 (ms)" name="rollbackP99Ms" problem={problem('rollbackP99Ms')} hint="after 20 requests">
                {input('rollbackP99Ms', { placeholder: 'none' })}
              </Field>
            </div>
          )}
        </fieldset>
      )}
    </form>
  );
}

/** The form as a dialog body: `getValue()` is what the user typed. */
export class DeployFormWidget extends ReactWidget {
  constructor(private props: Omit<IDeployFormProps, 'onChange'>) {
    super();
    this.values = props.initial;
    this.addClass('gpuhub-SubmitFormWidget');
  }

  values: IDeployFormValues;

  getValue(): IDeployFormValues {
    return this.values;
  }

  render(): JSX.Element {
    return <DeployForm {...this.props} onChange={v => (this.values = v)} />;
  }
}
