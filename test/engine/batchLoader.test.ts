/** The batch loader behind PostgreSQL's batched reads (core/db/batchLoader.ts), with a load of its own. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { batchLoader } from '../../src/core/db/batchLoader.js';

test('reads asked for in one turn are one load, answered in order; a key the load refuses fails only its own read', async () => {
  const loads: string[][] = [];
  const read = batchLoader(async (keys: string[]) => {
    loads.push(keys);
    if (keys.includes('bad')) throw new Error('refused: bad');
    return keys.map((k) => k.toUpperCase());
  });
  assert.deepEqual(await Promise.all([read('a'), read('b'), read('c')]), ['A', 'B', 'C']);
  assert.deepEqual(loads, [['a', 'b', 'c']]);

  loads.length = 0;
  const settled = await Promise.allSettled([read('x'), read('bad'), read('y')]);
  assert.deepEqual(
    settled.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)),
    ['X', 'refused: bad', 'Y'],
  );
  // The failed load of three, then each key alone.
  assert.deepEqual(loads, [['x', 'bad', 'y'], ['x'], ['bad'], ['y']]);

  // The next turn is a load of its own.
  loads.length = 0;
  assert.equal(await read('z'), 'Z');
  assert.deepEqual(loads, [['z']]);
});
