/**
 * The render thread of previews and test emails (RenderPool), shared by every workspace: one
 * workspace's slow templates wait their turn outside its queue, so another workspace's render
 * is not held up behind all of them, and none of them is refused for waiting.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RenderError, type RenderContext } from '../../src/engine/render.js';
import { MAX_RENDERS_PER_WORKSPACE, RenderPool } from '../../src/engine/renderPool.js';

const ctx = (workspaceId: number): RenderContext => ({ contact: {}, trigger: {}, workspace: { id: workspaceId, name: `w${workspaceId}` }, run: null });

test("one workspace's slow renders wait their turn: another workspace's is done before all of them are", async (t) => {
  const pool = new RenderPool();
  t.after(() => pool.close());
  // The thread started, so that start-up is not part of what is ordered below.
  assert.deepEqual(await pool.render({ text: 'warm' }, ctx(1)), { text: 'warm' });
  // Each runs into the 1 s render limit.
  const slow = { text: '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}' };
  const done: string[] = [];
  const theirs = Array.from({ length: MAX_RENDERS_PER_WORKSPACE + 2 }, (_, i) =>
    pool.render(slow, ctx(1)).then(
      () => assert.fail('a slow render completed'),
      (err: unknown) => {
        assert.ok(err instanceof RenderError, String(err));
        done.push(`slow ${i}`);
      },
    ),
  );
  const mine = pool.render({ text: 'hello {{ workspace.name }}' }, ctx(2)).then((r) => {
    done.push('quick');
    return r;
  });
  await Promise.all(theirs);
  assert.deepEqual(await mine, { text: 'hello w2' });
  // Without the bound it would come after all six; with it, after at most MAX_RENDERS_PER_WORKSPACE.
  assert.ok(done.indexOf('quick') <= MAX_RENDERS_PER_WORKSPACE, done.join(', '));
  assert.equal(done.length, MAX_RENDERS_PER_WORKSPACE + 3, 'every render answered, none refused');
});
