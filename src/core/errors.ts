/**
 * One small error hierarchy with stable codes. Services throw these; the HTTP error
 * handler maps them to RFC 9457 problem details and the CLI prints their message.
 */
export interface FieldError {
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly status: number;
  readonly code: string;
  readonly errors?: FieldError[];
  readonly headers?: Record<string, string>;
  /** Members of the problem body beyond the standard ones (RFC 9457, 3.2), as `importId`. */
  readonly extensions?: Record<string, string | number>;

  constructor(
    status: number,
    code: string,
    message: string,
    opts: { errors?: FieldError[]; headers?: Record<string, string>; extensions?: Record<string, string | number> } = {},
  ) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    if (opts.errors) this.errors = opts.errors;
    if (opts.headers) this.headers = opts.headers;
    if (opts.extensions) this.extensions = opts.extensions;
  }
}

export class BadRequestError extends AppError {
  constructor(code: string, message: string) {
    super(400, code, message);
  }
}

export class UnauthorizedError extends AppError {
  constructor(code: string, message: string) {
    super(401, code, message, { headers: { 'www-authenticate': 'Bearer' } });
  }
}

export class ForbiddenError extends AppError {
  constructor(message = 'Your role does not allow this operation') {
    super(403, 'forbidden', message);
  }
}

export class PlanError extends AppError {
  constructor(message: string) {
    super(403, 'plan_upgrade_required', message);
  }
}

export class NotFoundError extends AppError {
  constructor(code: string, message: string) {
    super(404, code, message);
  }
}

export class ConflictError extends AppError {
  constructor(code: string, message: string) {
    super(409, code, message);
  }
}

export class ValidationError extends AppError {
  constructor(code: string, message: string, errors?: FieldError[]) {
    super(422, code, message, errors ? { errors } : {});
  }
}

export class RateLimitError extends AppError {
  constructor(code: string, message: string, retryAfterSeconds: number) {
    super(429, code, message, { headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) } });
  }
}

/** No content coding: the header absent, empty, or `identity` (RFC 9110, 8.4.1). */
export function isIdentityEncoding(value: string): boolean {
  const v = value.trim().toLowerCase();
  return v === '' || v === 'identity';
}

/**
 * A body sent compressed (Content-Encoding gzip, br, ...): refused as RFC 9110 says (415,
 * naming the codings taken in Accept-Encoding) rather than read as JSON and refused as
 * invalid, or worse, taken as it is when its bytes happen to parse.
 */
export function unsupportedEncoding(accepted: 'identity' | 'gzip, identity' = 'identity'): AppError {
  const detail = accepted === 'identity' ? 'Send the body uncompressed, without Content-Encoding' : 'Send the body uncompressed, or gzip-compressed';
  return new AppError(415, 'unsupported_content_encoding', detail, { headers: { 'accept-encoding': accepted } });
}
