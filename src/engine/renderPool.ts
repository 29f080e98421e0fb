import { Piscina } from 'piscina';
import { RateLimitError } from '../core/errors.js';
import type { RenderContext } from './render.js';
import { RenderError } from './render.js';
import { workerFile } from './scheduler.js';
import type { RenderAnswer, RenderTask } from './worker.js';

/** Renders waiting for the thread before more are refused (429, checked before each run): a queue, not a backlog. */
const MAX_QUEUE = 64;
/**
 * Renders of one workspace queued or under way at once: each may take the whole render limit
 * (1 s), so without this one workspace's slow templates, within its callers' rate limits, could
 * fill the queue and keep every other workspace's previews waiting a minute.
 */
export const MAX_RENDERS_PER_WORKSPACE = 4;

/**
 * Renders templates for the API (previews, test emails) in a worker thread of its own, with
 * the same time and size budget as runs, so a hostile template keeps that thread busy for
 * at most its budget and never stalls the event loop that parses webhooks. The thread
 * starts on the first render and ends after a minute without one.
 */
export class RenderPool {
  private pool: Piscina | undefined;
  /** Renders queued or under way, by workspace. */
  private readonly byWorkspace = new Map<string, number>();

  async render(content: Record<string, unknown>, ctx: RenderContext): Promise<Record<string, unknown>> {
    this.pool ??= new Piscina({ filename: workerFile(), minThreads: 0, maxThreads: 1, idleTimeout: 60_000 });
    if (this.pool.queueSize >= MAX_QUEUE) throw new RateLimitError('rate_limited', 'Too many templates are being rendered; retry in a second', 1);
    const key = String(ctx.workspace.id ?? '');
    const mine = this.byWorkspace.get(key) ?? 0;
    if (mine >= MAX_RENDERS_PER_WORKSPACE)
      throw new RateLimitError('rate_limited', `This workspace has ${MAX_RENDERS_PER_WORKSPACE} templates being rendered already; retry in a second`, 1);
    this.byWorkspace.set(key, mine + 1);
    let answer: RenderAnswer;
    try {
      answer = (await this.pool.run({ content, ctx } satisfies RenderTask, { name: 'render' })) as RenderAnswer;
    } finally {
      const left = (this.byWorkspace.get(key) ?? 1) - 1;
      if (left > 0) this.byWorkspace.set(key, left);
      else this.byWorkspace.delete(key);
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
