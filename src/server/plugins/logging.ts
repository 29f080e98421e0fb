import type { FastifyRequest } from 'fastify';
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

export function loggerOptions(config: Config) {
  return {
    level: config.logLevel,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    serializers: {
      req(req: FastifyRequest) {
        return { method: req.method, url: redactUrl(req.url), remoteAddress: req.ip, requestId: req.id };
      },
    },
  };
}
