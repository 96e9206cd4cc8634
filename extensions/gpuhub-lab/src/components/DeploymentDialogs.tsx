/** The bodies of the traffic and scale dialogs: text fields, read back with getValue(). */
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { IDeployment } from '../types';

/** Fields named by keys, kept as text; the caller parses them (deployview.ts). */
abstract class FieldsWidget extends ReactWidget {
  constructor(
    protected values: Record<string, string>,
    private error: string
  ) {
    super();
    this.addClass('gpuhub-DeploymentDialog');
  }

  getValue(): Record<string, string> {
    return { ...this.values };
  }

  protected field(key: string, label: string, extra: React.InputHTMLAttributes<HTMLInputElement> = {}): JSX.Element {
    return (
      <label className="gpuhub-Field" key={key}>
        <span className="gpuhub-Field-label">{label}</span>
        <input
          className="jp-mod-styled"
          name={key}
          type="number"
          defaultValue={this.values[key]}
          onChange={e => (this.values[key] = e.target.value)}
          {...extra}
        />
      </label>
    );
  }

  protected errorLine(): JSX.Element | null {
    return this.error ? <div className="gpuhub-SubmitForm-error">{this.error}</div> : null;
  }
}

/** Percent per revision; revisions numbered as the service numbers them. */
export class TrafficFormWidget extends FieldsWidget {
  constructor(d: IDeployment, values: Record<string, string> | null, error: string) {
    super(
      values ??
        Object.fromEntries(
          d.revisions
            .filter(r => (r.state ?? 'ready') === 'ready')
            .map(r => [String(r.number), String(d.traffic[String(r.number)] ?? 0)])
        ),
      error
    );
  }

  render(): JSX.Element {
    return (
      <div className="gpuhub-SubmitForm-row">
        {this.errorLine()}
        {Object.keys(this.values).map(rev => this.field(rev, `r${rev} (%)`, { min: 0, max: 100 }))}
      </div>
    );
  }
}

export class ScaleFormWidget extends FieldsWidget {
  constructor(d: IDeployment, values: Record<string, string> | null, error: string) {
    super(
      values ?? {
        min: String(d.min_replicas),
        max: String(d.max_replicas),
        idle: String(d.scale_to_zero_after ?? 300)
      },
      error
    );
    this.gpus = d.gpus;
  }

  private gpus: number;

  render(): JSX.Element {
    return (
      <div className="gpuhub-SubmitForm-row">
        {this.errorLine()}
        {this.field('min', 'Min replicas', { min: 0, max: 64 })}
        {this.field('max', 'Max replicas', { min: 1, max: 64 })}
        {this.gpus === 0 && this.field('idle', 'Scale to zero after (s), with min 0', { min: 10, max: 604800 })}
      </div>
    );
  }
}
