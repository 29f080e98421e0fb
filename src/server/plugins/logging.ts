import type { FastifyRequest } from 'fastify';
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

/** Webhook tokens are credentials: they never reach the log, not even inside a URL. */
export function redactUrl(url: string): string {
  return url.replace(/(\/v1\/webhooks\/in\/)[^/?#]+/, '$1[redacted]');
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
