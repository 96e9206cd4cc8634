/**
 * The "Submit as job" form: what to run, where (team, pool, GPUs with the
 * team's free quota and whether it would borrow), for how long, with which
 * parameters, environment and directories.
 */
import { HTMLSelect, ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { gpuUnits } from '../format';
import { quotaView, requestFit } from '../quota';
import { datasetChoices, FormMode, IFormValues, requestUnits, shareChoices } from '../submission';
import { IDataset, IParameter, IPool, ITeam } from '../types';
import { DatasetPicker } from './DatasetPicker';
import { Field } from './Field';
import { ScheduleTab, SweepTab } from './WorkflowTabs';

export const PRIORITIES = ['batch', 'best-effort', 'interactive', 'production'];

export interface ISubmitFormProps {
  initial: IFormValues;
  teams: ITeam[];
  pools: IPool[];
  error: { field?: string; message: string } | null;
  onChange: (values: IFormValues) => void;
  /** The notebook's parameters cell (the Sweep tab's rows). */
  params?: IParameter[];
  /** Recent jobs and sweeps to run after: id → what the picker says. */
  recent?: { id: string; label: string }[];
  /** The datasets the user's teams may read (GET /datasets). */
  datasets?: IDataset[];
}

const MODES: { mode: FormMode; label: string }[] = [
  { mode: 'job', label: 'Job' },
  { mode: 'sweep', label: 'Sweep' },
  { mode: 'schedule', label: 'Schedule' }
];

/** Fields the tabs show their problem under (not in the banner). */
const TAB_FIELD = /^(sweep|maxRunning|metric|scheduleName|cron|timezone)/;

export function SubmitForm(props: ISubmitFormProps): JSX.Element {
  const [values, setValues] = React.useState<IFormValues>(props.initial);
  const set = (patch: Partial<IFormValues>) => {
    const next = { ...values, ...patch };
    setValues(next);
    props.onChange(next);
  };
  const update = (key: keyof IFormValues) => (
    e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>
  ) => set({ [key]: e.target.value });
  const invalid = (key: string) => props.error?.field === key;
  const pools = Array.from(
    new Set([...props.pools.map(p => p.name), ...(values.pool ? [values.pool] : [])])
  );
  const view = quotaView(props.teams, props.pools, values.team, values.pool);
  const gpus = requestUnits(values);
  const fit = view && Number.isFinite(gpus) ? requestFit(view, gpus) : null;
  const shares = shareChoices(props.pools.find(p => p.name === values.pool));
  const isNotebook = values.path.toLowerCase().endsWith('.ipynb');
  const input = (key: keyof IFormValues, extra: React.InputHTMLAttributes<HTMLInputElement> = {}) => (
    <input className="jp-mod-styled" name={key} value={values[key] as string} onChange={update(key)} {...extra} />
  );
  // A select that looks like one (JupyterLab's styled select: its caret, an input's height).
  const select = (key: keyof IFormValues, options: string[]) => (
    <HTMLSelect name={key} value={values[key] as string} onChange={update(key)} options={options} />
  );

  const mode = values.mode;
  const banner = props.error && !TAB_FIELD.test(props.error.field ?? '');
  const recent = props.recent ?? [];

  return (
    <form className="gpuhub-SubmitForm" data-mode={mode} onSubmit={e => e.preventDefault()}>
      <div className="gpuhub-SubmitForm-tabs" role="tablist">
        {MODES.map(m => (
          <button
            key={m.mode}
            type="button"
            role="tab"
            aria-selected={mode === m.mode}
            data-mode={m.mode}
            className={`gpuhub-SubmitForm-tab${mode === m.mode ? ' gpuhub-mod-active' : ''}`}
            onClick={() => set({ mode: m.mode })}
          >
            {m.label}
          </button>
        ))}
      </div>
      {banner && <div className="gpuhub-SubmitForm-error">{props.error!.message}</div>}
      <div className="gpuhub-SubmitForm-row">
        <Field label="File" name="path" invalid={invalid('path')} hint="a notebook, .py or .sh file of this server">
          {input('path')}
        </Field>
        <Field label="Name" name="name" invalid={invalid('name')}>
          {input('name', { placeholder: 'from the file name' })}
        </Field>
      </div>
      {mode === 'sweep' && <SweepTab values={values} set={set} error={props.error} params={props.params ?? []} />}
      {mode === 'schedule' && <ScheduleTab values={values} set={set} error={props.error} />}
      <div className="gpuhub-SubmitForm-row">
        <Field label="Team" name="team" invalid={invalid('team')}>
          {select('team', props.teams.map(t => t.name))}
        </Field>
        <Field label="Pool" name="pool" invalid={invalid('pool')}>
          {select('pool', pools)}
        </Field>
        <Field label="GPUs per node" name="gpus" invalid={invalid('gpus')}>
          {input('gpus', { type: 'number', min: 0, max: 64 })}
        </Field>
        <Field label="Nodes" name="nodes" invalid={invalid('nodes')}>
          {input('nodes', { type: 'number', min: 1, max: 1024 })}
        </Field>
        {(shares.length > 0 || values.gpuShare) && (
          <Field label="GPU share" name="gpuShare" invalid={invalid('gpuShare')} hint="part of one GPU">
            <HTMLSelect
              name="gpuShare"
              value={values.gpuShare}
              // A share is of one GPU on one node.
              onChange={e => set(e.target.value ? { gpuShare: e.target.value, gpus: '1', nodes: '1' } : { gpuShare: '' })}
              options={[{ label: 'whole GPUs', value: '' }, ...shares.map(s => ({ label: `${s} GPU`, value: s }))]}
            />
          </Field>
        )}
      </div>
      <div className={`gpuhub-SubmitForm-quota gpuhub-mod-${fit?.kind ?? 'none'}`}>
        {view ? (
          <>
            Team {view.team} in {view.pool}: {gpuUnits(view.free)} of {view.nominal} {view.model} free in quota,{' '}
            {view.poolFree} free in the pool. {fit && <strong>{fit.message}</strong>}
          </>
        ) : (
          `Team ${values.team || '?'} has no quota in pool ${values.pool || '?'}`
        )}
      </div>
      <div className="gpuhub-SubmitForm-row">
        <Field label="Time limit" name="timeLimit" invalid={invalid('timeLimit')} hint="e.g. 2h30m">
          {input('timeLimit', { placeholder: 'none' })}
        </Field>
        <Field label="Priority" name="priority" invalid={invalid('priority')}>
          {select('priority', PRIORITIES)}
        </Field>
        <Field label="Output directory" name="outputDir" invalid={invalid('outputDir')} hint="$OUTPUT_DIR in the job">
          {input('outputDir', { placeholder: 'outputs/<name>-<time>' })}
        </Field>
        <Field label="Checkpoint directory" name="checkpointDir" invalid={invalid('checkpointDir')} hint="$GPUHUB_CHECKPOINT_DIR, kept across attempts">
          {input('checkpointDir', { placeholder: 'one per job' })}
        </Field>
      </div>
      <DatasetPicker
        choices={datasetChoices(props.datasets ?? [], values.team, values.pool)}
        chosen={values.datasets}
        invalid={invalid('datasets')}
        onChange={datasets => set({ datasets })}
      />
      <div className="gpuhub-SubmitForm-row">
        {mode !== 'sweep' && (
          <Field
            label="Parameters"
            name="parameters"
            invalid={invalid('parameters')}
            hint={isNotebook ? "name = value per line, injected after the notebook's parameters cell" : 'name = value per line, passed as --name=value'}
          >
            <textarea className="jp-mod-styled" name="parameters" rows={4} value={values.parameters} onChange={update('parameters')} />
          </Field>
        )}
        <Field label="Environment" name="env" invalid={invalid('env')} hint="NAME=value per line; values are yours (and admins'), your team sees the names and the logs">
          <textarea className="jp-mod-styled" name="env" rows={4} value={values.env} onChange={update('env')} />
        </Field>
      </div>
      {mode !== 'schedule' && (
        <div className="gpuhub-SubmitForm-row">
          <Field label="Run after" name="afterId" invalid={invalid('afterId')} hint="wait for a job or a sweep of yours">
            <HTMLSelect
              name="afterId"
              value={values.afterId}
              onChange={update('afterId')}
              options={[{ value: '', label: 'nothing: run when admitted' }, ...recent.map(r => ({ value: r.id, label: r.label }))]}
            />
          </Field>
          <Field label="Condition" name="afterCondition">
            <HTMLSelect
              name="afterCondition"
              value={values.afterCondition}
              onChange={update('afterCondition')}
              options={[
                { value: 'ok', label: 'it succeeds' },
                { value: 'any', label: 'it ends' },
                { value: 'failed', label: 'it fails' }
              ]}
            />
          </Field>
        </div>
      )}
    </form>
  );
}

/** The form as a dialog body: `getValue()` is what the user typed; `onChange` hears each edit. */
export class SubmitFormWidget extends ReactWidget {
  constructor(
    private props: Omit<ISubmitFormProps, 'onChange'>,
    private onChange: (values: IFormValues) => void = () => undefined
  ) {
    super();
    this.values = props.initial;
    this.addClass('gpuhub-SubmitFormWidget');
  }

  values: IFormValues;

  getValue(): IFormValues {
    return this.values;
  }

  render(): JSX.Element {
    return (
      <SubmitForm
        {...this.props}
        onChange={v => {
          this.values = v;
          this.onChange(v);
        }}
      />
    );
  }
}
