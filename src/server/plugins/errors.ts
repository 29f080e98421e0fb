import { STATUS_CODES } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { StorageHealth } from '../../core/db/storage.js';
import { AppError, type FieldError } from '../../core/errors.js';

declare module 'fastify' {
  interface FastifyReply {
    /** The code of the problem this reply answered with, if any (the metrics count by it). */
    problemCode: string | null;
  }
}

/** On every response: no MIME sniffing of JSON into HTML, no URL (tokens!) in Referer. */
export const SECURITY_HEADERS = { 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer' } as const;

export interface Problem {
  type: 'about:blank';
  title: string;
  status: number;
  code: string;
  detail: string;
  errors?: FieldError[];
}

export function problem(status: number, code: string, detail: string, errors?: FieldError[]): Problem {
  return { type: 'about:blank', title: STATUS_CODES[status] ?? 'Error', status, code, detail, ...(errors ? { errors } : {}) };
}

export function sendProblem(reply: FastifyReply, p: Problem, headers: Record<string, string> = {}): FastifyReply {
  reply.problemCode = p.code;
  return reply.code(p.status).headers(headers).type('application/problem+json').send(p);
}

interface AjvError {
  instancePath?: string;
  keyword?: string;
  message?: string;
  params?: Record<string, unknown>;
}

/** Turns Ajv errors into JSON Pointer paths that name the offending field. */
export function fieldErrors(validation: AjvError[]): FieldError[] {
  const raw = validation.map((e) => {
    let path = e.instancePath || '';
    let message = e.message ?? 'is invalid';
    if (e.keyword === 'additionalProperties' && e.params?.additionalProperty !== undefined) {
      path = `${path}/${String(e.params.additionalProperty)}`;
      message = 'is not a known field';
    } else if (e.keyword === 'required' && e.params?.missingProperty !== undefined) {
      path = `${path}/${String(e.params.missingProperty)}`;
      message = 'is required';
    }
    return { path: path || '/', message, keyword: e.keyword };
  });
  // A nullable field fails each branch of its union: report one line per field, e.g.
  // "must be string or null", not three lines about anyOf.
  const byPath = new Map<string, string[]>();
  for (const e of raw) {
    if (e.keyword === 'anyOf' && raw.some((o) => o.path === e.path && o !== e)) continue;
    const list = byPath.get(e.path) ?? [];
    if (!list.includes(e.message)) list.push(e.message);
    byPath.set(e.path, list);
  }
  return [...byPath].map(([path, messages]) => ({
    path,
    message:
      messages.every((m) => m.startsWith('must be ')) && messages.length > 1 ? `must be ${messages.map((m) => m.slice(8)).join(' or ')}` : messages.join('; '),
  }));
}

const FASTIFY_CODES: Record<string, { status: number; code: string; detail: string }> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, code: 'unsupported_media_type', detail: 'Send the body as Content-Type: application/json' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, code: 'invalid_content_length', detail: 'The Content-Length header does not match the body' },
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, code: 'payload_too_large', detail: 'The request body is larger than this server accepts' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, code: 'invalid_json', detail: 'The body is empty but Content-Type says JSON' },
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, code: 'invalid_json', detail: 'The body is not valid JSON' },
};

/** Seconds a client is asked to wait when the disk is full. */
export const STORAGE_FULL_RETRY_AFTER = 30;

/** 503 storage_full: the write failed for lack of space; nothing of this request was kept. */
export function sendStorageFull(reply: FastifyReply): FastifyReply {
  return sendProblem(reply, problem(503, 'storage_full', 'The server is out of disk space; nothing of this request was kept. Retry later'), {
    'retry-after': String(STORAGE_FULL_RETRY_AFTER),
  });
}

export function registerErrorHandling(app: FastifyInstance, storage?: StorageHealth): void {
  if (!app.hasReplyDecorator('problemCode')) app.decorateReply('problemCode', null);
  app.setErrorHandler((err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof AppError) {
      return sendProblem(reply, { ...err.extensions, ...problem(err.status, err.code, err.message, err.errors) }, err.headers);
    }
    if (err.validation) {
      const errors = fieldErrors(err.validation as AjvError[]);
      switch (err.validationContext) {
        case 'body':
          return sendProblem(reply, problem(422, 'validation_failed', 'The request body is invalid', errors));
        case 'params':
          return sendProblem(reply, problem(404, 'not_found', 'No resource has this id'));
        default:
          return sendProblem(reply, problem(400, 'invalid_query', 'The query string is invalid', errors));
      }
    }
    const known = err.code ? FASTIFY_CODES[err.code] : undefined;
    if (known) return sendProblem(reply, problem(known.status, known.code, known.detail));
    if (err instanceof SyntaxError || (err.statusCode === 400 && /JSON/i.test(err.message))) {
      return sendProblem(reply, problem(400, 'invalid_json', 'The body is not valid JSON'));
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      const code = (STATUS_CODES[status] ?? 'bad_request').toLowerCase().replace(/[^a-z0-9]+/g, '_');
      return sendProblem(reply, problem(status, code, STATUS_CODES[status] ?? 'Bad request'));
    }
    // A full disk is logged once a minute by StorageHealth, not once a request.
    if (storage?.noteFailure(err)) return sendStorageFull(reply);
    req.log.error({ err }, 'request failed');
    return sendProblem(reply, problem(500, 'internal_error', 'An internal error occurred; it has been logged'));
  });

  app.setNotFoundHandler((req, reply) => sendProblem(reply, problem(404, 'route_not_found', `No route ${req.method} ${req.url.split('?')[0]}`)));
}
