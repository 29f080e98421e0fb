import { toValue, type Emitter, type Liquid, type Template } from 'liquidjs';
import { escapePointerKey } from '../core/jsonPath.js';
import { createLiquid } from '../core/liquid.js';

/** What a template can see: `{{ contact.firstName }}`, `{{ trigger.fields[0].value }}` ... */
export interface RenderContext {
  contact: Record<string, unknown>;
  trigger: Record<string, unknown>;
  workspace: Record<string, unknown>;
  run: Record<string, unknown> | null;
  /** Extra top-level variables (test emails expose their `data` here). */
  extra?: Record<string, unknown>;
  /**
   * What is left of the render time of one run's execution (RUN_RENDER_BUDGET_MS), spent by
   * every render made with this context: each string has its own limit, and without this a
   * run of many steps and fields could hold its thread for a limit per string.
   */
  budget?: RenderBudget;
}

/** Milliseconds of rendering a run's execution may spend, over all its templates. */
export interface RenderBudget {
  remainingMs: number;
}

/** A template that could not be rendered: an error in it, or a time, memory or size limit. */
export class RenderError extends Error {
  override name = 'RenderError';
  /** Where in the rendered content the failing string is (a JSON Pointer), when known. */
  readonly path: string | undefined;

  constructor(message: string, path?: string) {
    super(message);
    this.path = path;
  }
}

/** The most one rendered string may hold: far more than any message needs. */
export const MAX_RENDERED_BYTES = 256 * 1024;
/** Parsed templates kept for reuse: how many, their total source length, the largest one. */
const CACHE_ENTRIES = 500;
const CACHE_SOURCE_CHARS = 4_000_000;
const CACHE_ENTRY_CHARS = 200_000;
const MAX_CONTENT_DEPTH = 32;

class OutputTooLarge extends Error {
  constructor() {
    super(`the rendered text is larger than ${MAX_RENDERED_BYTES} bytes`);
  }
}

/** Liquid's own output stringification (nil is empty, arrays are concatenated). */
function stringify(value: unknown): string {
  const v = toValue(value) as unknown;
  if (typeof v === 'string') return v;
  if (v === null || v === undefined) return '';
  if (Array.isArray(v)) return v.map(stringify).join('');
  return String(v);
}

/**
 * An emitter that refuses to grow past the output limit. Counting UTF-16 units is a lower
 * bound on UTF-8 bytes, so a huge string is refused without ever being flattened.
 */
class BoundedEmitter implements Emitter {
  buffer = '';
  write(html: unknown): void {
    const text = stringify(html);
    if (this.buffer.length + text.length > MAX_RENDERED_BYTES) throw new OutputTooLarge();
    this.buffer += text;
  }
}

/**
 * The shared configuration, with one addition for rendering: every emitter Liquid creates
 * itself (the top level, and `{% capture %}`, which memoryLimit does not count) is bounded,
 * so doubling a captured string cannot build a gigabyte rope that a later filter flattens.
 */
function renderingLiquid(opts: { escapeHtml: boolean }): Liquid {
  const liquid = createLiquid(opts.escapeHtml ? { outputEscape: 'escape' } : {});
  const renderer = liquid.renderer;
  const renderTemplates = renderer.renderTemplates.bind(renderer);
  renderer.renderTemplates = (templates, ctx, emitter) => renderTemplates(templates, ctx, emitter ?? new BoundedEmitter());
  if (opts.escapeHtml) {
    // Output that ends in `| escape` is escaped already: it must not be escaped twice.
    for (const name of ['escape', 'escape_once']) {
      const impl = liquid.filters[name]!;
      liquid.registerFilter(name, { handler: typeof impl === 'function' ? impl : impl.handler, raw: true });
    }
  }
  return liquid;
}

/**
 * Two engines: plain text, and HTML, where every `{{ output }}` is HTML-escaped unless its
 * last filter is `raw`, so a contact named `<script>` cannot inject markup into an email.
 * The escaping is compiled into the parsed template, so each engine has its own cache entries.
 */
const engines = { text: renderingLiquid({ escapeHtml: false }), html: renderingLiquid({ escapeHtml: true }) } as const;
type Mode = keyof typeof engines;
const renderLimitMs: number = engines.text.options.renderLimit;
/**
 * A run's execution (to its next resting point) renders for this long at most, all its
 * templates together: as long as one template may, so a run holds its thread no longer than
 * one render could, however many steps and fields it has. Real templates take milliseconds.
 */
export const RUN_RENDER_BUDGET_MS = renderLimitMs;
const BUDGET_SPENT = `the run's templates took more than their ${RUN_RENDER_BUDGET_MS} ms of rendering`;

/** Parsed templates by mode and source, least recently used first. */
const parsed = new Map<string, Template[]>();
let cachedChars = 0;

function parse(source: string, mode: Mode): Template[] {
  const key = `${mode}:${source}`;
  const hit = parsed.get(key);
  if (hit) {
    parsed.delete(key);
    parsed.set(key, hit);
    return hit;
  }
  let templates: Template[];
  try {
    templates = engines[mode].parse(source);
  } catch (err) {
    throw new RenderError(`template syntax error: ${firstLine(err)}`);
  }
  if (source.length <= CACHE_ENTRY_CHARS) {
    parsed.set(key, templates);
    cachedChars += key.length;
    for (const [key] of parsed) {
      if (parsed.size <= CACHE_ENTRIES && cachedChars <= CACHE_SOURCE_CHARS) break;
      parsed.delete(key);
      cachedChars -= key.length;
    }
  }
  return templates;
}

function firstLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split('\n')[0] || 'the template could not be rendered';
}

/** Renders one parsed source within a deadline (performance.now() milliseconds). */
async function renderBefore(source: string, ctx: RenderContext, deadline: number, mode: Mode = 'text'): Promise<string> {
  const templates = parse(source, mode);
  const started = performance.now();
  const { budget } = ctx;
  if (budget && budget.remainingMs <= 0) throw new RenderError(BUDGET_SPENT);
  const remaining = Math.floor(Math.min(deadline - started, budget?.remainingMs ?? Number.POSITIVE_INFINITY));
  if (remaining <= 0) throw new RenderError('template render limit exceeded');
  const scope = { ...ctx.extra, contact: ctx.contact, trigger: ctx.trigger, workspace: ctx.workspace, run: ctx.run };
  let out: string;
  try {
    out = (await engines[mode].render(templates, scope, { renderLimit: remaining })) as string;
  } catch (err) {
    // In a run the budget never exceeds a string's own limit (it starts equal to it), so a
    // time limit met there is the run's budget, whichever of the two clocks noticed first.
    const message = firstLine(err);
    throw new RenderError(budget && message.startsWith('template render limit exceeded') ? BUDGET_SPENT : message);
  } finally {
    if (budget) budget.remainingMs -= performance.now() - started;
  }
  if (Buffer.byteLength(out) > MAX_RENDERED_BYTES) throw new RenderError(new OutputTooLarge().message);
  return out;
}

/** Renders one Liquid string; a missing variable renders empty. */
export async function renderString(source: string, ctx: RenderContext): Promise<string> {
  return renderBefore(source, ctx, performance.now() + renderLimitMs);
}

/** Where HTML is rendered: the `html` part at the top of content, which only EMAIL content has. */
const HTML_PATH = '/html';

/**
 * Renders every string inside a template's content (recursively, e.g. WhatsApp
 * `parameters`) and returns the same shape. All strings share one render time budget, so
 * content with many strings is bounded like one. Output in the `html` part of an email is
 * HTML-escaped (`{{ x | raw }}` opts out); every other part (subject, text, SMS, WhatsApp)
 * is plain text and is not.
 */
export async function renderContent(content: Record<string, unknown>, ctx: RenderContext): Promise<Record<string, unknown>> {
  const deadline = performance.now() + renderLimitMs;
  const walk = async (value: unknown, path: string, depth: number): Promise<unknown> => {
    if (depth > MAX_CONTENT_DEPTH) throw new RenderError('the content is nested too deeply', path);
    if (typeof value === 'string') {
      try {
        return await renderBefore(value, ctx, deadline, path === HTML_PATH ? 'html' : 'text');
      } catch (err) {
        throw err instanceof RenderError ? new RenderError(err.message, path) : err;
      }
    }
    if (Array.isArray(value)) {
      const out: unknown[] = [];
      for (const [i, item] of value.entries()) out.push(await walk(item, `${path}/${i}`, depth + 1));
      return out;
    }
    if (value !== null && typeof value === 'object') {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value)) out[key] = await walk(item, `${path}/${escapePointerKey(key)}`, depth + 1);
      return out;
    }
    return value;
  };
  return (await walk(content, '', 0)) as Record<string, unknown>;
}

/**
 * Evaluates a Liquid condition (`trigger.total > 100 and contact.email contains "@x.com"`)
 * as `{% if <condition> %}`. A condition that closes the tag itself is not a condition.
 */
export async function evaluateCondition(condition: string, ctx: RenderContext): Promise<boolean> {
  if (condition.trim() === '' || condition.includes('%}')) throw new RenderError('not a valid condition');
  return (await renderString(`{% if ${condition} %}true{% endif %}`, ctx)) === 'true';
}
