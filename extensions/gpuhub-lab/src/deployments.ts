/**
 * The deployment half of the plugin: the Deployments panel (polling only
 * while it is shown), the "Deploy Model…" commands of the palette and the
 * file browser's context menu on folders. Returns the deployer, which the
 * Jobs panel's "Deploy outputs…" uses too.
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import { Clipboard, ICommandPalette, Notification } from '@jupyterlab/apputils';
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { GpuHubApi } from './api';
import { IDeploymentActions } from './components/DeploymentCard';
import { DeploymentsPanel } from './components/DeploymentsPanel';
import { DeploymentTab } from './components/DeploymentTab';
import { deploymentViewId } from './components/DeploymentDetail';
import { Deployer } from './deploy';
import { deploymentName } from './deployform';
import { deploymentKey, DeploymentsModel, IDeployPollSettings } from './deploymodel';
import { deployIcon } from './icon';
import { JobsModel } from './model';
import { IDeployment } from './types';

namespace CommandIDs {
  export const deploy = 'gpuhub:deploy';
  export const deploySelected = 'gpuhub:deploy-selected';
  export const openDeployments = 'gpuhub:open-deployments';
  export const openDeployment = 'gpuhub:open-deployment';
}

export function setupDeployments(options: {
  app: JupyterFrontEnd;
  api: GpuHubApi;
  jobs: JobsModel;
  settings: ISettingRegistry.ISettings;
  browsers: IFileBrowserFactory | null;
  palette: ICommandPalette | null;
  restorer: ILayoutRestorer | null;
}): Deployer {
  const { app, settings, browsers } = options;
  const pollSettings = (): IDeployPollSettings => ({
    activeInterval: settings.get('activeInterval').composite as number,
    interval: settings.get('deploymentsInterval').composite as number,
    maxInterval: settings.get('maxInterval').composite as number
  });
  // The poll runs while the panel or a deployment's tab is shown.
  const views = new Map<string, DeploymentTab>();
  const shown = () => panel.isVisible || Array.from(views.values()).some(v => v.isVisible);
  const model: DeploymentsModel = new DeploymentsModel(options.api, pollSettings(), shown);
  settings.changed.connect(() => model.configure(pollSettings()));

  const deployer = new Deployer(options.jobs, model, d => {
    Notification.success(`Deployed ${d.team}/${d.name}: ${d.message}`, { autoClose: 4000 });
    app.shell.activateById(panel.id);
    void model.refreshNow();
  });
  const endpointUrl = (d: IDeployment) => `${window.location.origin}${d.endpoint}`;
  const actions: IDeploymentActions = {
    copyEndpoint: d => {
      Clipboard.copyToSystem(endpointUrl(d));
      Notification.info(`Copied ${endpointUrl(d)}`, { autoClose: 3000 });
    },
    run: (d, action) => void deployer.run(d, action),
    cancelRevision: (d, revision) => void deployer.cancelRevision(d, revision),
    open: d => void app.commands.execute(CommandIDs.openDeployment, { team: d.team, name: d.name })
  };
  const panel: DeploymentsPanel = new DeploymentsPanel(model, {
    ...actions,
    deployNew: () => void app.commands.execute(CommandIDs.deploy),
    endpointUrl
  });
  panel.id = 'gpuhub-deployments';
  panel.title.icon = deployIcon;
  panel.title.caption = 'Model deployments';
  app.shell.add(panel, 'left', { rank: 601 });
  options.restorer?.add(panel, 'gpuhub-deployments');

  /** The folder selected in the file browser, if one is. */
  const selectedFolder = (): string | null => {
    const browser = browsers?.tracker.currentWidget;
    const item = browser ? Array.from(browser.selectedItems())[0] : undefined;
    return item?.type === 'directory' ? item.path : null;
  };
  /** What the palette's command deploys: the selected folder, else the one the file browser shows. */
  const currentFolder = (): string => selectedFolder() ?? browsers?.tracker.currentWidget?.model.path ?? '';
  const deployFolder = (folder: string) =>
    deployer.deploy(folder ? { modelDir: folder, name: deploymentName(folder) } : {});

  app.commands.addCommand(CommandIDs.deploy, {
    label: 'Deploy Model…',
    caption: 'Serve a model folder of your files behind an HTTP endpoint',
    icon: deployIcon,
    execute: args => deployFolder((args.path as string) ?? currentFolder())
  });
  app.commands.addCommand(CommandIDs.deploySelected, {
    label: 'Deploy Model…',
    caption: 'Serve this folder behind an HTTP endpoint',
    icon: deployIcon,
    isVisible: () => selectedFolder() !== null,
    execute: () => deployFolder(selectedFolder() ?? '')
  });
  app.commands.addCommand(CommandIDs.openDeployment, {
    label: args => `Deployment ${args.team}/${args.name}`,
    caption: 'A deployment in a tab: endpoint, full-size charts, revisions, actions',
    execute: args => {
      const key = deploymentKey({ team: args.team as string, name: args.name as string });
      let view = views.get(key);
      if (!view) {
        view = new DeploymentTab(model, key, endpointUrl, actions);
        view.id = deploymentViewId({ team: args.team as string, name: args.name as string });
        view.title.label = `Deployment ${key}`;
        view.title.icon = deployIcon;
        view.disposed.connect(() => views.delete(key));
        views.set(key, view);
        app.shell.add(view, 'main');
      }
      app.shell.activateById(view.id);
      void model.refreshNow();
    }
  });
  app.commands.addCommand(CommandIDs.openDeployments, {
    label: 'Show Model Deployments',
    execute: () => app.shell.activateById(panel.id)
  });
  options.palette?.addItem({ command: CommandIDs.deploy, category: 'GPU Hub' });
  options.palette?.addItem({ command: CommandIDs.openDeployments, category: 'GPU Hub' });
  app.contextMenu.addItem({
    command: CommandIDs.deploySelected,
    selector: '.jp-DirListing-item[data-isdir="true"]',
    rank: 3
  });

  model.start();
  return deployer;
}
