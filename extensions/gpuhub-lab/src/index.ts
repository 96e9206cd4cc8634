/**
 * GPU Hub in JupyterLab: "Submit as job" (notebook toolbar, file browser,
 * palette, launcher), the Jobs panel, the log viewer, the quota status bar
 * item and notifications; "Deploy model" (file browser, palette, a finished
 * job) and the Deployments panel. Every call goes to this server's /gpuhub/ API,
 * which forwards it to the scheduler service with the server's token.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  Notification,
  showDialog,
  ToolbarButton
} from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { FileDialog, IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { ILauncher } from '@jupyterlab/launcher';
import { NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStateDB } from '@jupyterlab/statedb';
import { IStatusBar, showPopup } from '@jupyterlab/statusbar';

import { GpuHubApi } from './api';
import { JobsPanel } from './components/JobsPanel';
import { QuotaPopoverBody, QuotaStatus } from './components/QuotaStatus';
import { deploymentName, modelDirOfJob } from './deployform';
import { setupDeployments } from './deployments';
import { gpuIcon } from './icon';
import { LogViewer, logViewerId } from './logviewer';
import { IPollSettings, JobsModel } from './model';
import { formFromJob, IFormValues, isSubmittable, EMPTY_FORM } from './submission';
import { Submitter } from './submit';
import { IJobNote } from './transitions';
import { IWorkload } from './types';
import { workflowActions } from './workflows';

const PLUGIN_ID = 'gpuhub-lab:plugin';

namespace CommandIDs {
  export const submit = 'gpuhub:submit';
  export const submitSelected = 'gpuhub:submit-selected';
  export const openJobs = 'gpuhub:open-jobs';
  export const openLogs = 'gpuhub:open-logs';
  export const openOutput = 'gpuhub:open-output';
}

const NOTE_TYPES: Record<IJobNote['kind'], 'info' | 'success' | 'error' | 'warning'> = {
  queued: 'info',
  started: 'info',
  succeeded: 'success',
  failed: 'error',
  preempted: 'warning',
  cancelled: 'info'
};

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Submit notebooks and scripts as GPU jobs and follow them.',
  autoStart: true,
  requires: [ISettingRegistry, IStateDB, IDocumentManager],
  optional: [ICommandPalette, ILauncher, IFileBrowserFactory, IStatusBar, ILayoutRestorer],
  activate: async (
    app: JupyterFrontEnd,
    registry: ISettingRegistry,
    state: IStateDB,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    browsers: IFileBrowserFactory | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null
  ) => {
    const settings = await registry.load(PLUGIN_ID);
    const pollSettings = (): IPollSettings => ({
      activeInterval: settings.get('activeInterval').composite as number,
      idleInterval: settings.get('idleInterval').composite as number,
      maxInterval: settings.get('maxInterval').composite as number
    });
    const api = new GpuHubApi();
    const model = new JobsModel(api, pollSettings());
    settings.changed.connect(() => model.configure(pollSettings()));
    const deployer = setupDeployments({ app, api, jobs: model, settings, browsers, palette, restorer });

    // ---- the Jobs panel -------------------------------------------------
    const actions = {
      cancel: (job: IWorkload) => void cancel(job),
      resubmit: (job: IWorkload) => void resubmit(job),
      openLogs: (job: IWorkload, attempt?: number) =>
        void app.commands.execute(CommandIDs.openLogs, attempt === undefined ? { id: job.id } : { id: job.id, attempt }),
      openOutput: (job: IWorkload) => void app.commands.execute(CommandIDs.openOutput, { id: job.id }),
      downloadOutputs: (job: IWorkload) => download(api.outputsUrl(job.id)),
      deploy: (job: IWorkload) =>
        void deployer.deploy({ modelDir: modelDirOfJob(job), name: deploymentName(job.name), team: job.team })
    };
    const panel = new JobsPanel(model, {
      ...actions,
      ...workflowActions(api, model),
      toggleSweep: (id: string) => model.toggleSweep(id),
      openPath: (path: string) => void docManager.openOrReveal(path)
    });
    panel.id = 'gpuhub-jobs';
    panel.title.icon = gpuIcon;
    panel.title.caption = 'GPU jobs';
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, 'gpuhub-jobs');
    model.shown = () => panel.isVisible;

    const submitter = new Submitter(
      model,
      state,
      (): Partial<IFormValues> => ({ priority: settings.get('defaultPriority').composite as string }),
      job => {
        if (job) {
          model.add(job);
        }
        app.shell.activateById(panel.id);
        void model.refreshNow();
      }
    );

    async function cancel(job: IWorkload): Promise<void> {
      const answer = await showDialog({
        title: 'Cancel job',
        body: `Cancel ${job.name} (${job.id})? A running job gets SIGTERM, then SIGKILL after its grace period.`,
        buttons: [Dialog.cancelButton({ label: 'Keep it' }), Dialog.warnButton({ label: 'Cancel job' })]
      });
      if (!answer.button.accept) {
        return;
      }
      try {
        await api.cancel(job.id);
      } catch (e) {
        Notification.error(`Cannot cancel ${job.name}: ${(e as Error).message}`);
      }
      void model.refreshNow();
    }

    async function resubmit(job: IWorkload): Promise<void> {
      try {
        const full = await api.job(job.id);
        await submitter.submit(full.source_path ?? '', formFromJob(full, EMPTY_FORM));
      } catch (e) {
        Notification.error(`Cannot resubmit ${job.name}: ${(e as Error).message}`);
      }
    }

    // ---- commands ---------------------------------------------------------
    /** The file selected in the file browser, if it can run as a job. */
    const selectedPath = (): string => {
      const browser = browsers?.tracker.currentWidget;
      const item = browser ? Array.from(browser.selectedItems())[0] : undefined;
      return item && isSubmittable(item.path) ? item.path : '';
    };
    /** The file a command without a path argument means: the open document, else the selection. */
    const currentPath = (): string => {
      const widget = app.shell.currentWidget;
      const context = widget ? docManager.contextForWidget(widget) : undefined;
      return context && isSubmittable(context.path) ? context.path : selectedPath();
    };

    /** JupyterLab's file picker, showing folders and the files that can run as jobs. */
    const pickFile = async (): Promise<string> => {
      const result = await FileDialog.getOpenFiles({
        manager: docManager,
        title: 'Submit as job: choose a notebook, .py or .sh file',
        filter: item => (item.type === 'directory' || isSubmittable(item.path) ? {} : null)
      });
      const chosen = result.button.accept ? result.value?.find(item => isSubmittable(item.path)) : undefined;
      return chosen?.path ?? '';
    };

    app.commands.addCommand(CommandIDs.submit, {
      label: args => (args.isLauncher ? 'Submit GPU job' : 'Submit as Job…'),
      caption: 'Run a notebook or a script as a batch job on the GPU cluster',
      icon: gpuIcon,
      execute: async args => {
        // From the launcher (or with nothing open or selected): pick the file first.
        const path = (args.path as string) || (args.isLauncher ? '' : currentPath()) || (await pickFile());
        return path ? submitter.submit(path) : null;
      }
    });
    app.commands.addCommand(CommandIDs.submitSelected, {
      label: 'Submit as Job…',
      caption: 'Run this file as a batch job on the GPU cluster',
      icon: gpuIcon,
      isVisible: () => !!selectedPath(),
      execute: () => submitter.submit(selectedPath())
    });
    app.commands.addCommand(CommandIDs.openJobs, {
      label: 'Show GPU Jobs',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.openLogs, {
      label: 'Open Job Log',
      execute: async args => {
        const id = args.id as string;
        const attempt = typeof args.attempt === 'number' ? args.attempt : undefined;
        const existing = Array.from(app.shell.widgets('main')).find(w => w.id === logViewerId(id, attempt));
        if (existing) {
          app.shell.activateById(existing.id);
          return;
        }
        const maxChars = settings.get('logMaxChars').composite as number;
        const viewer = new LogViewer(api, await api.job(id), maxChars, attempt);
        app.shell.add(viewer, 'main', { mode: 'split-right' });
        app.shell.activateById(viewer.id);
      }
    });
    app.commands.addCommand(CommandIDs.openOutput, {
      label: 'Open Output Notebook',
      execute: async args => {
        const job = await api.job(args.id as string);
        if (!job.output_path) {
          Notification.warning(`${job.name} has no output notebook in this server's files`);
          return;
        }
        return docManager.openOrReveal(job.output_path);
      }
    });

    palette?.addItem({ command: CommandIDs.submit, category: 'GPU Hub' });
    palette?.addItem({ command: CommandIDs.openJobs, category: 'GPU Hub' });
    launcher?.add({ command: CommandIDs.submit, category: 'GPU Hub', rank: 1, args: { isLauncher: true } });
    app.contextMenu.addItem({
      command: CommandIDs.submitSelected,
      selector: '.jp-DirListing-item[data-isdir="false"]',
      rank: 3
    });

    // The notebook toolbar's button.
    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (nb: NotebookPanel) => {
        const button = new ToolbarButton({
          icon: gpuIcon,
          label: 'Submit as job',
          tooltip: 'Run this notebook as a GPU batch job',
          className: 'gpuhub-SubmitButton',
          onClick: () => void submitter.submit(nb.context.path)
        });
        nb.toolbar.insertAfter('cellType', 'gpuhub-submit', button);
        return button;
      }
    });

    // ---- status bar ---------------------------------------------------------
    if (statusBar) {
      const item = new QuotaStatus(model, anchor => {
        void model.refreshNow(); // the popover shows what holds now, not the last idle poll
        showPopup({ body: new QuotaPopoverBody(model), anchor, align: 'left' });
      });
      statusBar.registerStatusItem('gpuhub-lab:quota', { item, align: 'left', rank: 10 });
    }

    // ---- notifications --------------------------------------------------------
    model.jobNotes.connect((_, notes) => {
      if (!settings.get('notifications').composite) {
        return;
      }
      for (const note of notes) {
        Notification.emit(note.message, NOTE_TYPES[note.kind], {
          autoClose: note.kind === 'failed' ? false : 8000,
          actions: [{ label: 'Open log', callback: () => actions.openLogs(note.job) }]
        });
      }
    });
    model.newNotices.connect((_, notices) => {
      if (!settings.get('notifications').composite) {
        return;
      }
      for (const n of notices) {
        Notification.warning(n.message, { autoClose: false });
      }
    });

    model.start();
  }
};

function download(url: string): void {
  const a = document.createElement('a');
  a.href = url;
  a.download = '';
  document.body.appendChild(a);
  a.click();
  a.remove();
}

export default plugin;
