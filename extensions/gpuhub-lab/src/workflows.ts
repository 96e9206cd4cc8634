/**
 * What the Jobs panel's sweep and schedule buttons do: the action, a
 * confirmation where it ends something, the service's refusal as a
 * notification, and a poll at once to show the result.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ApiError, GpuHubApi } from './api';
import { IScheduleEditProps, ScheduleEditForm } from './components/ScheduleEditForm';
import { IScheduleActions } from './components/Schedules';
import { ISweepActions } from './components/SweepRow';
import { JobsModel } from './model';
import { editValues, IScheduleEditValues, schedulePatch, ScheduleEditProblems, SERVICE_FIELDS } from './scheduleedit';
import { ISchedule, ISweep } from './types';

async function confirmed(title: string, body: string, label: string): Promise<boolean> {
  const answer = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label })]
  });
  return answer.button.accept;
}

async function attempt(what: string, action: () => Promise<unknown>, model: JobsModel): Promise<void> {
  try {
    await action();
  } catch (e) {
    Notification.error(`Cannot ${what}: ${(e as Error).message}`);
  }
  void model.refreshNow();
}

export function workflowActions(
  api: GpuHubApi,
  model: JobsModel
): Pick<ISweepActions, 'sweepAction'> & IScheduleActions {
  return {
    sweepAction: async (sweep: ISweep, action: 'cancel' | 'retry') => {
      if (
        action === 'cancel' &&
        !(await confirmed('Cancel sweep', `Cancel every task of ${sweep.name} (${sweep.id}) that has not ended?`, 'Cancel all'))
      ) {
        return;
      }
      await attempt(`${action} ${sweep.name}`, () => api.sweepAction(sweep.id, action), model);
    },
    scheduleAction: async (schedule: ISchedule, action: 'pause' | 'resume' | 'run') => {
      await attempt(
        `${action} ${schedule.name}`,
        async () => {
          const answer = await api.scheduleAction(schedule.id, action);
          if (action === 'run') {
            Notification.success(`Schedule ${schedule.name} ran now: job ${(answer as { id: string }).id}`, { autoClose: 4000 });
          }
        },
        model
      );
    },
    editSchedule: async (schedule: ISchedule) => {
      await editSchedule(api, schedule);
      void model.refreshNow();
    },
    deleteSchedule: async (schedule: ISchedule) => {
      if (!(await confirmed('Delete schedule', `Delete ${schedule.name} (${schedule.id})? The jobs it made stay.`, 'Delete'))) {
        return;
      }
      await attempt(`delete ${schedule.name}`, () => api.deleteSchedule(schedule.id), model);
    }
  };
}

/** The edit form as a dialog body: `getValue()` is what the user typed. */
class ScheduleEditWidget extends ReactWidget {
  constructor(private props: Omit<IScheduleEditProps, 'onChange'>) {
    super();
    this.values = props.initial;
    this.addClass('gpuhub-SubmitFormWidget');
  }

  values: IScheduleEditValues;

  getValue(): IScheduleEditValues {
    return this.values;
  }

  render(): JSX.Element {
    return React.createElement(ScheduleEditForm, { ...this.props, onChange: v => (this.values = v) });
  }
}

/** The edit dialog, shown again with the problems next to their fields until the service takes it. */
async function editSchedule(api: GpuHubApi, schedule: ISchedule): Promise<ISchedule | null> {
  let values = editValues(schedule);
  let problems: ScheduleEditProblems = {};
  let error = '';
  for (;;) {
    const result = await showDialog({
      title: `Edit schedule ${schedule.name}`,
      body: new ScheduleEditWidget({ initial: values, problems, error }),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Save' })],
      focusNodeSelector: 'input[name="cron"]'
    });
    if (!result.button.accept) {
      return null;
    }
    values = result.value ?? values;
    const checked = schedulePatch(schedule, values);
    if (!checked.patch) {
      [problems, error] = [checked.problems, ''];
      continue;
    }
    if (!Object.keys(checked.patch).length) {
      return schedule; // nothing changed
    }
    try {
      const saved = await api.updateSchedule(schedule.id, checked.patch);
      Notification.success(`Schedule ${saved.name}: ${saved.cron} (${saved.timezone})`, { autoClose: 4000 });
      return saved;
    } catch (e) {
      const field = e instanceof ApiError && e.field ? SERVICE_FIELDS[e.field] : undefined;
      [problems, error] = field
        ? [{ [field]: (e as ApiError).reason }, '']
        : [{}, e instanceof Error ? e.message : String(e)];
    }
  }
}
