import * as React from 'react';
import { renderToStaticMarkup } from 'react-dom/server';

import { DatasetPicker } from '../src/components/DatasetPicker';
import { datasetChoices, EMPTY_FORM, formProblem, remembered, toSubmission } from '../src/submission';
import { IDataset } from '../src/types';

function dataset(name: string, team: string, shared_with: string[] = [], pools: string[] = []): IDataset {
  return {
    name,
    team,
    shared_with,
    pools,
    node_labels: {},
    path: `/home/lead/${name}`,
    mount: `/datasets/${name}`,
    created_by: 'lead',
    created_at: '2026-01-01T00:00:00Z',
    size_bytes: null,
    files: null,
    measured_at: null
  } as IDataset;
}

const IMAGENET = dataset('imagenet', 'vision', ['nlp']);
const CENSUS = dataset('census', 'vision', [], ['eu']);
const GENOMES = dataset('genomes', 'bio', ['vision', 'nlp'], ['eu', 'us']);

describe('the datasets the submit dialog offers', () => {
  it.each([
    ['vision', 'us', IMAGENET, "team vision's, shared with nlp", ''],
    ['nlp', 'us', IMAGENET, "team vision's, shared with nlp", ''],
    ['bio', 'us', IMAGENET, "team vision's, shared with nlp", 'team bio may not read it'],
    ['vision', 'eu', CENSUS, "team vision's; only in pool eu", ''],
    ['vision', 'us', CENSUS, "team vision's; only in pool eu", 'not readable in pool us'],
    ['nlp', 'a100', GENOMES, "team bio's, shared with vision, nlp; only in pools eu, us", 'not readable in pool a100']
  ])('for team %s in pool %s: %s', (team, pool, d, about, refusal) => {
    expect(datasetChoices([d], team, pool)).toEqual([{ name: d.name, about, refusal }]);
  });
});

describe('a submission with datasets', () => {
  const values = { ...EMPTY_FORM, path: 'train.py', team: 'vision', pool: 'a100' };

  it('sends the chosen names, and none when none is chosen', () => {
    expect(toSubmission({ ...values, datasets: ['imagenet', 'census'] }).datasets).toEqual(['imagenet', 'census']);
    expect(toSubmission(values)).not.toHaveProperty('datasets');
  });

  it('does not carry them into the next form (another file reads other data)', () => {
    expect(remembered({ ...values, datasets: ['imagenet'] })).not.toHaveProperty('datasets');
  });

  it("shows the service's refusal under the Datasets label", () => {
    const message = 'team bio may not read dataset imagenet (it is team vision\'s and not shared with bio: ask a lead of vision)';
    expect(formProblem('datasets', message)).toEqual({ field: 'datasets', message: `Datasets: ${message}` });
    expect(formProblem('pool', 'dataset census may only be read in pool eu')).toEqual({
      field: 'pool',
      message: 'Pool: dataset census may only be read in pool eu'
    });
  });
});

describe("the submit form's datasets", () => {
  const render = (datasets: IDataset[], chosen: string[], invalid = false) =>
    renderToStaticMarkup(
      <DatasetPicker choices={datasetChoices(datasets, 'vision', 'a100')} chosen={chosen} invalid={invalid} onChange={() => undefined} />
    );

  it('are a checkbox each, ticked when chosen, with why one would be refused', () => {
    const html = render([IMAGENET, CENSUS], ['imagenet']);
    expect(html).toMatch(/<input type="checkbox" name="datasets" checked="" value="imagenet"\/>/);
    expect(html).toMatch(/<input type="checkbox" name="datasets" value="census"\/>/);
    expect(html).toContain('not readable in pool a100');
    expect(html).not.toContain('gpuhub-Field-invalid');
  });

  it('are marked when the service refused one', () => {
    expect(render([IMAGENET], [], true)).toContain('gpuhub-Field-invalid" data-field="datasets"');
  });

  it('are not shown when there is none to read', () => {
    expect(render([], [])).toBe('');
  });
});
