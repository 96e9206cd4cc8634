/**
 * The deploy flow (fill the form, send it, show it again with the problems
 * next to their fields until the service takes it) and the Deployments
 * panel's actions (the traffic and scale dialogs, delete's confirmation).
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';

import { ApiError } from './api';
import { DeployFormWidget } from './components/DeployForm';
import { ScaleFormWidget, TrafficFormWidget } from './components/DeploymentDialogs';
import {
  checkDeployForm,
  EMPTY_DEPLOY_FORM,
  existingDeployment,
  FieldProblems,
  IDeployFormValues,
  SERVICE_FIELDS,
  withDeploymentSettings
} from './deployform';
import { DeploymentsModel } from './deploymodel';
import { DeploymentAction, DialogError, parseScale, parseTraffic } from './deployview';
import { JobsModel } from './model';
import { IDeployment } from './types';

export class Deployer {
  constructor(
    private jobs: JobsModel,
    private model: DeploymentsModel,
    private onDeployed: (d: IDeployment) => void
  ) {}

  /** The deploy dialog, starting from `start` (a folder, a job's outputs). */
  async deploy(start: Partial<IDeployFormValues>): Promise<IDeployment | null> {
    if (!this.jobs.me) {
      await this.jobs.refreshNow();
    }
    // The names taken now, so a new revision is recognised as one.
    const deployments = await this.model.api.deployments().catch(() => this.model.deployments);
    let values = this.initialValues(start, deployments);
    let problems: FieldProblems = {};
    let error = '';
    for (;;) {
      const body = new DeployFormWidget({
        initial: values,
        teams: this.jobs.teams,
        pools: this.jobs.pools,
        deployments,
        problems,
        error
      });
      const result = await showDialog({
        title: 'Deploy model',
        body,
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Deploy' })],
        focusNodeSelector: 'input[name="name"]'
      });
      if (!result.button.accept) {
        return null;
      }
      values = result.value ?? values;
      const checked = checkDeployForm(values, existingDeployment(values, deployments));
      if (!checked.request) {
        [problems, error] = [checked.problems, ''];
        continue;
      }
      try {
        const deployed = await this.model.api.deploy(checked.request);
        this.onDeployed(deployed);
        return deployed;
      } catch (e) {
        const field = e instanceof ApiError && e.field ? SERVICE_FIELDS[e.field] : undefined;
        // Next to its field, the message needs no "field: " before it.
        [problems, error] = field
          ? [{ [field]: (e as ApiError).message.replace(`${(e as ApiError).field}: `, '') }, '']
          : [{}, e instanceof Error ? e.message : String(e)];
      }
    }
  }

  private initialValues(start: Partial<IDeployFormValues>, deployments: IDeployment[]): IDeployFormValues {
    const teams = this.jobs.teams.map(t => t.name);
    const team = start.team && teams.includes(start.team) ? start.team : this.jobs.primaryTeam;
    const quotas = this.jobs.teams.find(t => t.name === team)?.quotas ?? {};
    const pool = Object.keys(quotas)[0] ?? this.jobs.pools[0]?.name ?? '';
    const values: IDeployFormValues = { ...EMPTY_DEPLOY_FORM, pool, ...start, team };
    const existing = existingDeployment(values, deployments);
    return existing ? withDeploymentSettings(values, existing) : values;
  }

  /** Cancel a waiting revision, once asked; false when kept or refused (the panel shows why). */
  async cancelRevision(d: IDeployment, revision: number): Promise<boolean> {
    const r = d.revisions.find(x => x.number === revision);
    const serving = Object.keys(d.traffic).length
      ? `${d.name} keeps serving ${Object.keys(d.traffic)
          .map(n => `revision ${n}`)
          .join(' and ')} as now.`
      : `${d.name} has no other revision: it serves nothing until you deploy again.`;
    const answer = await showDialog({
      title: 'Cancel revision',
      body: `Cancel revision ${revision} of ${d.team}/${d.name}${r?.reason ? ` (${r.reason})` : ''}? It will never roll out; ${serving}`,
      buttons: [Dialog.cancelButton({ label: 'Keep waiting' }), Dialog.warnButton({ label: 'Cancel revision' })]
    });
    return answer.button.accept ? this.model.act(d, 'cancel-revision', { revision }) : false;
  }

  /** An action of the panel; false when it was cancelled or refused (the panel shows why). */
  async run(d: IDeployment, action: DeploymentAction): Promise<boolean> {
    if (action === 'promote' || action === 'rollback') {
      return this.model.act(d, action);
    }
    if (action === 'delete') {
      const answer = await showDialog({
        title: 'Delete deployment',
        body: `Delete ${d.team}/${d.name}? Its replicas stop and its endpoint answers 404; its ${d.revisions.length} revision(s) are forgotten.`,
        buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label: 'Delete' })]
      });
      return answer.button.accept ? this.model.act(d, 'delete') : false;
    }
    const [title, makeBody, parse] =
      action === 'traffic'
        ? ([
            `Traffic of ${d.name}`,
            (v: Record<string, string> | null, err: string) => new TrafficFormWidget(d, v, err),
            (v: Record<string, string>) => ({ traffic: parseTraffic(v) })
          ] as const)
        : ([
            `Replicas of ${d.name}`,
            (v: Record<string, string> | null, err: string) => new ScaleFormWidget(d, v, err),
            (v: Record<string, string>) => parseScale(v.min, v.max, v.idle)
          ] as const);
    let values: Record<string, string> | null = null;
    let error = '';
    for (;;) {
      const result: Dialog.IResult<Record<string, string>> = await showDialog({
        title,
        body: makeBody(values, error),
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Apply' })]
      });
      if (!result.button.accept || !result.value) {
        return false;
      }
      const typed: Record<string, string> = result.value;
      values = typed;
      try {
        return await this.model.act(d, action, parse(typed));
      } catch (e) {
        if (!(e instanceof DialogError)) {
          throw e;
        }
        error = e.message;
      }
    }
  }
}
