import type { FastifyBaseLogger, FastifyRequest } from 'fastify';
import pretty from 'pino-pretty';
import type { Config } from '../../core/config.js';

/** Paths redacted from every log line, wherever a serializer or a handler put them. */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-service-signature"]',
  'res.headers["set-cookie"]',
  '*.password',
  '*.token',
  '*.refreshToken',
  '*.key',
  '*.signingSecret',
  '*.credentials',
  '*.pass',
  '*.authToken',
  '*.accessToken',
];

/** A query parameter whose name says it carries a secret. */
const SECRET_PARAM = /token|key|secret|pass|signature|auth|session|code/i;
/** A value that is one whatever its name: an API key, a JWT. */
const SECRET_VALUE = /svc_(?:live|test)_|^eyJ[\w-]*\.[\w-]*\./;

/**
 * Webhook tokens are credentials: they never reach the log, not even inside a URL. Nor does
 * a credential a client put in the query string by mistake (`?access_token=`, `?api_key=`, an
 * API key under any name): svc never reads one there, but the URL is logged.
 */
export function redactUrl(url: string): string {
  const path = url.replace(/(\/v1\/webhooks\/in\/)[^/?#]+/, '$1[redacted]');
  const q = path.indexOf('?');
  if (q === -1) return path;
  const query = path
    .slice(q + 1)
    .replace(/([^&=]*)=([^&]*)/g, (pair, name: string, value: string) => (SECRET_PARAM.test(name) || SECRET_VALUE.test(value) ? `${name}=[redacted]` : pair));
  return `${path.slice(0, q + 1)}${query}`;
}

/** Whether log lines are written for people: `pretty`, or `auto` when the destination is a terminal. */
export function prettyLogs(format: Config['logFormat'], to: 'stdout' | 'stderr' = 'stdout'): boolean {
  if (format !== 'auto') return format === 'pretty';
  return (to === 'stderr' ? process.stderr : process.stdout).isTTY === true;
}

/**
 * pino-pretty as an in-process destination stream, not a transport: a transport loads a
 * module by path in a worker thread, which a bundle (or a single executable) does not
 * have. Redaction happens in pino before a line reaches it, so both formats hide secrets.
 */
function prettyStream(to: 'stdout' | 'stderr') {
  const stream = to === 'stderr' ? process.stderr : process.stdout;
  return pretty({
    destination: to === 'stderr' ? 2 : 1,
    colorize: stream.isTTY === true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    sync: true,
  });
}

export function loggerOptions(config: Config, to: 'stdout' | 'stderr' = 'stdout') {
  return {
    level: config.logLevel,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    serializers: {
      req(req: FastifyRequest) {
        return { method: req.method, url: redactUrl(req.url), remoteAddress: req.ip, requestId: req.id };
      },
    },
    ...(prettyLogs(config.logFormat, to) ? { stream: prettyStream(to) } : to === 'stderr' ? { stream: process.stderr } : {}),
  };
}

type LevelName = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
type LogArgs = Parameters<FastifyBaseLogger['info']>;

/**
 * A request's logger, made only when something is logged at an enabled level. Fastify gives
 * every request a child logger bound to its id, and with redaction on pino runs the bindings
 * through the redactor: microseconds per request, spent on the many requests (every accepted
 * webhook, at the usual levels) that never log a line.
 */
class LazyChildLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger & { isLevelEnabled(level: string): boolean },
    private readonly bindings: Record<string, unknown>,
    private readonly options: object,
  ) {}

  private real(): FastifyBaseLogger {
    this.made ??= this.parent.child(this.bindings, this.options);
    return this.made;
  }

  private write(level: LevelName, args: LogArgs): void {
    if (this.made || this.parent.isLevelEnabled(level)) (this.real()[level] as (...a: LogArgs) => void)(...args);
  }

  get level(): string {
    return this.made ? this.made.level : this.parent.level;
  }

  set level(level: string) {
    this.real().level = level;
  }

  fatal(...args: LogArgs): void {
    this.write('fatal', args);
  }
  error(...args: LogArgs): void {
    this.write('error', args);
  }
  warn(...args: LogArgs): void {
    this.write('warn', args);
  }
  info(...args: LogArgs): void {
    this.write('info', args);
  }
  debug(...args: LogArgs): void {
    this.write('debug', args);
  }
  trace(...args: LogArgs): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Record<string, unknown>, options?: object): FastifyBaseLogger {
    return this.real().child(bindings, options);
  }
}

/** Fastify's childLoggerFactory: a lazy child, unless the route sets a level or serializers of its own. */
export function lazyChildLoggerFactory(
  logger: FastifyBaseLogger,
  bindings: Record<string, unknown>,
  options: Parameters<FastifyBaseLogger['child']>[1] & object,
): FastifyBaseLogger {
  const parent = logger as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
  if (options.level !== undefined || options.serializers !== undefined || typeof parent.isLevelEnabled !== 'function') return logger.child(bindings, options);
  return new LazyChildLogger(parent as FastifyBaseLogger & { isLevelEnabled(level: string): boolean }, bindings, options) as unknown as FastifyBaseLogger;
}
