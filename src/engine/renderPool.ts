import { Piscina } from 'piscina';
import { RateLimitError } from '../core/errors.js';
import { PlacesByKey } from '../core/places.js';
import type { RenderContext } from './render.js';
import { RenderError } from './render.js';
import { workerFile } from './scheduler.js';
import type { RenderAnswer, RenderTask } from './worker.js';

/** Renders waiting for the thread before more are refused (429, checked before each run): a queue, not a backlog. */
const MAX_QUEUE = 64;
/**
 * Renders of one workspace in the thread's queue or under way at once; its others wait their
 * turn outside it. Each may take the whole render limit (1 s), so without this one workspace's
 * slow templates, within its callers' rate limits, could fill the queue and keep every other
 * workspace's previews waiting a minute; with it another workspace's render waits behind at
 * most these.
 */
export const MAX_RENDERS_PER_WORKSPACE = 4;
/** Renders of one workspace waiting for their turn; one more is refused (429) at once. */
const MAX_WAITING_PER_WORKSPACE = 64;

/**
 * Renders templates for the API (previews, test emails) in a worker thread of its own, with
 * the same time and size budget as runs, so a hostile template keeps that thread busy for
 * at most its budget and never stalls the event loop that parses webhooks. The thread
 * starts on the first render and ends after a minute without one.
 */
export class RenderPool {
  private pool: Piscina | undefined;
  /** Each workspace's turns in the thread's queue. */
  private readonly byWorkspace = new PlacesByKey(MAX_RENDERS_PER_WORKSPACE, MAX_WAITING_PER_WORKSPACE);

  async render(content: Record<string, unknown>, ctx: RenderContext): Promise<Record<string, unknown>> {
    const turn = this.byWorkspace.take(String(ctx.workspace.id ?? ''));
    if (!turn) throw new RateLimitError('rate_limited', 'Too many templates of this workspace are waiting to be rendered; retry in a second', 1);
    const release = await turn;
    let answer: RenderAnswer;
    try {
      this.pool ??= new Piscina({ filename: workerFile(), minThreads: 0, maxThreads: 1, idleTimeout: 60_000 });
      if (this.pool.queueSize >= MAX_QUEUE) throw new RateLimitError('rate_limited', 'Too many templates are being rendered; retry in a second', 1);
      answer = (await this.pool.run({ content, ctx } satisfies RenderTask, { name: 'render' })) as RenderAnswer;
    } finally {
      release();
    }
    if ('error' in answer) throw new RenderError(answer.error.message, answer.error.path);
    return answer.rendered;
  }

  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = undefined;
    await pool?.destroy();
  }
}
