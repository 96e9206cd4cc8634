/**
 * The submit flow: fill the form (defaults from the last submission, the
 * notebook's parameters cell), send it, and show the form again with the
 * service's message when it refuses.
 */
import { Dialog, Notification } from '@jupyterlab/apputils';
import { IStateDB } from '@jupyterlab/statedb';

import { ApiError } from './api';
import { SubmitFormWidget } from './components/SubmitForm';
import { JobsModel } from './model';
import {
  defaultName,
  EMPTY_FORM,
  FormError,
  formProblem,
  IFormValues,
  impossibleRequest,
  remembered,
  RememberedValues,
  toSubmission
} from './submission';
import { browserTimezone } from './cron';
import { GridError } from './sweep';
import { IParameter, IWorkload } from './types';
import { acceptLabel, toSchedule, toSweep } from './workflowform';

const LAST_SUBMISSION = 'gpuhub-lab:last-submission';

export class Submitter {
  constructor(
    private model: JobsModel,
    private state: IStateDB,
    private defaults: () => Partial<IFormValues>,
    /** After a submission: the job it made (null for a sweep or a schedule). */
    private onSubmitted: (job: IWorkload | null) => void
  ) {}

  /** The form for a file, starting from the last submission and the notebook's parameters. */
  async initialValues(path: string, params: IParameter[]): Promise<IFormValues> {
    const last = ((await this.state.fetch(LAST_SUBMISSION)) ?? {}) as Partial<RememberedValues>;
    const values: IFormValues = {
      ...EMPTY_FORM,
      timezone: browserTimezone(),
      ...this.defaults(),
      ...last,
      path,
      name: path ? defaultName(path) : ''
    };
    values.parameters = params.map(p => `${p.name} = ${p.default}`).join('\n');
    return values;
  }

  /** The notebook's parameters cell (none for a script, or a notebook without one). */
  private async parameters(path: string): Promise<IParameter[]> {
    if (!path.toLowerCase().endsWith('.ipynb')) {
      return [];
    }
    try {
      return await this.model.api.parameters(path);
    } catch {
      return []; // no parameters cell to show: the form starts empty there
    }
  }

  async submit(path: string, start?: IFormValues): Promise<IWorkload | null> {
    if (!this.model.me) {
      await this.model.refreshNow();
    }
    // The notebook's parameters cell: the form's parameters and the Sweep tab's rows.
    const params = await this.parameters(start?.path ?? path);
    let values = start ?? (await this.initialValues(path, params));
    values = this.fillTeamAndPool(values);
    let error: { field?: string; message: string } | null = null;
    const { teams, pools } = this.model;
    const recent = this.model.recentTargets();
    // Read once a dialog: datasets change seldom (a service without them: none offered).
    const datasets = await this.model.api.datasets().catch(() => []);
    for (;;) {
      // Submit is disabled while the hint says the GPU count can never fit;
      // its label says what it makes (a job, a sweep of N tasks, a schedule).
      let dialog: Dialog<IFormValues> | null = null;
      const block = (v: IFormValues) => {
        const button = dialog?.node.querySelector<HTMLButtonElement>('.jp-Dialog-button.jp-mod-accept');
        if (button) {
          button.disabled = impossibleRequest(v, teams, pools) !== null;
          const label = button.querySelector('.jp-Dialog-buttonLabel');
          if (label) {
            label.textContent = acceptLabel(v, params);
          }
        }
      };
      const body = new SubmitFormWidget({ initial: values, teams, pools, error, params, recent, datasets }, block);
      dialog = new Dialog({
        title: 'Submit as job',
        body,
        buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Submit' })],
        focusNodeSelector: 'input[name="name"]'
      });
      const shown = dialog.launch();
      block(values);
      const result = await shown;
      if (!result.button.accept) {
        return null;
      }
      values = result.value ?? values;
      const impossible = impossibleRequest(values, teams, pools);
      if (impossible) {
        // Enter in a field accepts the dialog even with Submit disabled
        error = formProblem('gpus', impossible);
        continue;
      }
      // The dialog is gone while the server answers: say that it is on its way.
      const note = Notification.emit(`Submitting ${values.name || values.path}…`, 'in-progress', {
        autoClose: false
      });
      let made: { message: string; job?: IWorkload };
      try {
        made = await this.send(values, params);
      } catch (e) {
        Notification.dismiss(note);
        if (e instanceof GridError) {
          error = { field: `sweepValues.${e.param}`, message: e.message };
        } else if (e instanceof FormError) {
          error = formProblem(e.field, e.message);
        } else if (e instanceof ApiError) {
          error = formProblem(e.field, e.reason);
        } else {
          Notification.error(`Submitting failed: ${e}`);
          return null;
        }
        continue;
      }
      // A fresh toast, not an update of the in-progress one: an update that
      // lands before that toast is drawn can be lost (seen on a loaded host).
      Notification.dismiss(note);
      Notification.success(made.message, { autoClose: 6000 });
      this.onSubmitted(made.job ?? null);
      // The next form starts from this one (a failure here loses no job).
      await this.state.save(LAST_SUBMISSION, remembered(values) as any).catch(() => undefined);
      return made.job ?? null;
    }
  }

  /** What the dialog's tab makes: a job, a sweep or a schedule. */
  private async send(values: IFormValues, params: IParameter[]): Promise<{ message: string; job?: IWorkload }> {
    const api = this.model.api;
    if (values.mode === 'sweep') {
      const sweep = await api.submitSweep(toSweep(values, params));
      return { message: `Sweep ${sweep.name} submitted: ${sweep.total} tasks (${sweep.id})` };
    }
    if (values.mode === 'schedule') {
      const schedule = await api.createSchedule(toSchedule(values));
      return { message: `Schedule ${schedule.name} created (${schedule.cron}, ${schedule.timezone})` };
    }
    const job = await api.submit(toSubmission(values));
    return { message: `Job ${job.name} submitted (${job.id})`, job };
  }

  /** A team the user is in and a pool where it has quota. */
  private fillTeamAndPool(values: IFormValues): IFormValues {
    const teams = this.model.teams.map(t => t.name);
    const team = teams.includes(values.team) ? values.team : this.model.primaryTeam;
    const quotas = this.model.teams.find(t => t.name === team)?.quotas ?? {};
    const pools = this.model.pools.map(p => p.name);
    const withQuota = Object.keys(quotas).sort((a, b) => quotas[b].nominal - quotas[a].nominal);
    const pool = pools.includes(values.pool) ? values.pool : withQuota[0] ?? pools[0] ?? '';
    return { ...values, team, pool };
  }
}
