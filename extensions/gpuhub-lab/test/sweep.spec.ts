import {
  countTasks,
  GridError,
  gridFrom,
  groupBySweep,
  hasRetryable,
  parseGridLines,
  parseValueList,
  progressSegments,
  progressText,
  taskCount
} from '../src/sweep';
import { IParameter, ISweep, ISweepCounts } from '../src/types';
import { job } from './fixtures';

describe('a parameter’s values, typed as its default', () => {
  it.each([
    ['float', '0.1, 0.01,1e-3', [0.1, 0.01, 0.001]],
    ['int', '1,2, 3', [1, 2, 3]],
    ['int', '-4', [-4]],
    ['str', 'resnet, "vit", \'mlp\'', ['resnet', 'vit', 'mlp']],
    ['str', '1, 2', ['1', '2']],
    ['bool', 'True, false', [true, false]],
    ['list', '[1, 2], [3]', [[1, 2], [3]]],
    ['none', 'None, 3, "a"', [null, 3, 'a']],
    ['expr', '5, x', [5, 'x']],
    ['float', '[0.5, 1.5]', [0.5, 1.5]],
    ['str', '["a,b", "c"]', ['a,b', 'c']],
    ['float', '   ', []]
  ])('%s: "%s"', (type, text, values) => {
    expect(parseValueList('p', text, type)).toEqual(values);
  });

  it.each([
    ['int', '1, 2.5', 'p: "2.5" is not a whole number'],
    ['float', '0.1, fast', 'p: "fast" is not a number'],
    ['bool', 'yes', 'p: "yes" is not True or False'],
    ['float', '0.1,,0.2', 'p: an empty value between commas']
  ])('refuses %s "%s", naming the parameter', (type, text, message) => {
    expect(() => parseValueList('p', text, type)).toThrow(message);
    try {
      parseValueList('p', text, type);
    } catch (e) {
      expect((e as GridError).param).toBe('p');
    }
  });
});

const PARAMS: IParameter[] = [
  { name: 'lr', default: '0.1', inferred_type_name: 'None', help: '', type: 'float' },
  { name: 'epochs', default: '1', inferred_type_name: 'None', help: '', type: 'int' },
  { name: 'model', default: '"resnet"', inferred_type_name: 'None', help: '', type: 'str' }
];

describe('the grid', () => {
  it('has the parameters given values, in the notebook’s order, and counts their product', () => {
    const grid = gridFrom(PARAMS, { model: 'a, b', lr: '0.1, 0.01' });
    expect(Object.keys(grid)).toEqual(['lr', 'model']);
    expect(grid).toEqual({ lr: [0.1, 0.01], model: ['a', 'b'] });
    expect(taskCount(grid)).toBe(4);
  });

  it.each([
    [{}, 0],
    [{ lr: '0.1' }, 1],
    [{ lr: '1,2,3', epochs: '1,2', model: 'a,b,c,d' }, 24],
    [{ lr: '', epochs: '5' }, 1]
  ])('%j makes %i tasks', (values, n) => {
    expect(taskCount(gridFrom(PARAMS, values))).toBe(n);
  });

  it('reads a script’s "name = values" lines, untyped values as JSON or text', () => {
    const written = parseGridLines('lr = 0.1, 0.2\n# nothing\ntag: a, b\n');
    expect(written).toEqual({ lr: '0.1, 0.2', tag: 'a, b' });
    expect(gridFrom([], written)).toEqual({ lr: [0.1, 0.2], tag: ['a', 'b'] });
    expect(() => parseGridLines('lr 0.1')).toThrow('line 1');
  });
});

const COUNTS: ISweepCounts = {
  waiting: 0,
  queued: 1,
  held: 0,
  running: 1,
  stopping: 0,
  succeeded: 1,
  failed: 0,
  cancelled: 1,
  stopped: 0
};

function sweep(over: Partial<ISweep> = {}): ISweep {
  return {
    id: 's1',
    name: 'lr-sweep',
    team: 'vision',
    user: 'alice',
    state: 'running',
    max_running: 2,
    total: 4,
    counts: COUNTS,
    metric: null,
    best: null,
    submitted_at: '2026-11-30T01:00:00Z',
    finished_at: null,
    after: [],
    ...over
  };
}

describe('the progress bar', () => {
  it('has succeeded, failed (with cancelled), running and queued segments adding up to the total', () => {
    const segments = progressSegments(COUNTS, 4);
    expect(segments.map(s => [s.kind, s.count, s.percent])).toEqual([
      ['succeeded', 1, 25],
      ['failed', 1, 25],
      ['running', 1, 25],
      ['queued', 1, 25]
    ]);
    expect(progressText(COUNTS, 4)).toBe('2/4 done · 1 cancelled · 1 running · 1 waiting');
  });

  it.each([
    [{ succeeded: 4 }, 4, [100, 0, 0, 0], '4/4 done'],
    [{ waiting: 2, held: 1, queued: 1 }, 4, [0, 0, 0, 100], '0/4 done · 4 waiting'],
    [{ stopping: 1, stopped: 1 }, 2, [0, 50, 50, 0], '1/2 done · 1 cancelled · 1 running'],
    [{ failed: 2, cancelled: 1, succeeded: 1 }, 4, [25, 75, 0, 0], '4/4 done · 2 failed · 1 cancelled'],
    [{}, 0, [0, 0, 0, 0], '0/0 done']
  ])('%j of %i', (counts, total, percents, text) => {
    expect(progressSegments(counts, total).map(s => s.percent)).toEqual(percents);
    expect(progressText(counts, total)).toBe(text);
  });

  it('offers retry while a task failed or was cancelled', () => {
    expect(hasRetryable(COUNTS)).toBe(true);
    expect(hasRetryable({ succeeded: 3, running: 1 })).toBe(false);
  });
});

describe('grouping the Jobs panel by sweep', () => {
  it('puts a sweep’s tasks under one row, in index order, newest row first', () => {
    const items = groupBySweep(
      [
        job({ id: 'w9', submitted_at: '2026-11-30T03:00:00Z' }),
        job({ id: 'w3', sweep_id: 's1', sweep_index: 1, submitted_at: '2026-11-30T01:00:01Z' }),
        job({ id: 'w2', sweep_id: 's1', sweep_index: 0, submitted_at: '2026-11-30T01:00:01Z' }),
        job({ id: 'w1', submitted_at: '2026-11-29T00:00:00Z' })
      ],
      [sweep()]
    );
    expect(items.map(i => (i.kind === 'job' ? i.job.id : i.id))).toEqual(['w9', 's1', 'w1']);
    const group = items[1];
    expect(group.kind === 'sweep' && group.tasks.map(t => t.id)).toEqual(['w2', 'w3']);
  });

  it('lists a sweep without tasks in the list, and one whose sweep is not listed yet', () => {
    const items = groupBySweep(
      [job({ id: 'w5', sweep_id: 's2', sweep_index: 0, submitted_at: '2026-11-30T05:00:00Z', state: 'running' })],
      [sweep({ id: 's1' })]
    );
    expect(items.map(i => (i.kind === 'sweep' ? [i.id, i.sweep?.id ?? null, i.tasks.length] : null))).toEqual([
      ['s2', null, 1],
      ['s1', 's1', 0]
    ]);
    expect(countTasks(items[0].kind === 'sweep' ? items[0].tasks : [])).toEqual({ running: 1 });
  });
});
