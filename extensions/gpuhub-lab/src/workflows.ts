/**
 * What the Jobs panel's sweep and schedule buttons do: the action, a
 * confirmation where it ends something, the service's refusal as a
 * notification, and a poll at once to show the result.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { GpuHubApi } from './api';
import { IScheduleActions } from './components/Schedules';
import { ISweepActions } from './components/SweepRow';
import { JobsModel } from './model';
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
    deleteSchedule: async (schedule: ISchedule) => {
      if (!(await confirmed('Delete schedule', `Delete ${schedule.name} (${schedule.id})? The jobs it made stay.`, 'Delete'))) {
        return;
      }
      await attempt(`delete ${schedule.name}`, () => api.deleteSchedule(schedule.id), model);
    }
  };
}
