import { Liquid, type LiquidOptions } from 'liquidjs';

/**
 * The one Liquid configuration: no file system (no include/render/layout of files), strict
 * filters so a typo fails instead of passing silently, lenient variables so a missing
 * field renders empty (a contact without a first name is normal). `extra` adds what one
 * use needs (HTML output escaping for email bodies).
 */
export function createLiquid(extra: Pick<LiquidOptions, 'outputEscape'> = {}): Liquid {
  return new Liquid({
    ...extra,
    strictFilters: true,
    strictVariables: false,
    ownPropertyOnly: true,
    relativeReference: false,
    // An in-memory (empty) template map: include/render/layout can never reach the disk.
    templates: {},
    // Bounds against hostile templates: source size, render time (ms) and memory.
    parseLimit: 1_000_000,
    renderLimit: 1_000,
    memoryLimit: 10_000_000,
  });
}

const parser = createLiquid();

export interface LiquidProblem {
  message: string;
  line?: number;
  col?: number;
}

/** Parses a template and reports its first syntax error with its position, if any. */
export function liquidSyntaxProblem(source: string): LiquidProblem | undefined {
  try {
    parser.parse(source);
    return undefined;
  } catch (err) {
    const e = err as Error & { token?: { getPosition?: () => [number, number] } };
    const pos = e.token?.getPosition?.();
    // A template nested thousands of tags deep outgrows the parser's stack: say so, not how.
    if (err instanceof RangeError || /Maximum call stack size exceeded/.test(e.message)) return { message: 'the template nests its tags too deeply' };
    const message = e.message.split('\n')[0] ?? 'invalid template';
    return pos ? { message, line: pos[0], col: pos[1] } : { message };
  }
}
