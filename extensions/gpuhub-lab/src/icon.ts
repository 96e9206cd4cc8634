import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">
<g class="jp-icon3" fill="#616161"><path d="M7 7h10v10H7z" opacity=".35"/>
<path d="M9 2h2v3H9zm4 0h2v3h-2zM9 19h2v3H9zm4 0h2v3h-2zM2 9h3v2H2zm0 4h3v2H2zm17-4h3v2h-3zm0 4h3v2h-3z"/>
<path d="M5 5h14v14H5zm2 2v10h10V7z"/></g></svg>`;

export const gpuIcon = new LabIcon({ name: 'gpuhub-lab:gpu', svgstr: svg });

/** A deployment: a model (the box) answering requests (the arrows). */
const deploySvg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" width="16" height="16">
<g class="jp-icon3" fill="#616161"><path d="M4 9h9v9H4z" opacity=".35"/>
<path d="M3 8h11v11H3zm2 2v7h7v-7zm11-6h5v5h-2V7.4l-3.3 3.3-1.4-1.4L17.6 6H16zm0 11h2v4h3v2h-5z"/></g></svg>`;

export const deployIcon = new LabIcon({ name: 'gpuhub-lab:deploy', svgstr: deploySvg });
