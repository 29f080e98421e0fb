// The console's one API client: typed by the server's OpenAPI document (schema.d.ts), the
// access token in memory only, and one refresh (the HttpOnly cookie) when a call answers 401.
import type { paths } from './schema';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
type Operation<P extends keyof paths, M extends Method> = paths[P][M];
type Json<R> = R extends { content: { 'application/json': infer B } } ? B : undefined;
type Responses<O> = O extends { responses: infer R } ? R : never;
/** The body of the success answer (200, 201 or 202; 204 is undefined). */
export type ResultOf<P extends keyof paths, M extends Method> =
  Responses<Operation<P, M>> extends infer R
    ? 200 extends keyof R
      ? Json<R[200]>
      : 201 extends keyof R
        ? Json<R[201]>
        : 202 extends keyof R
          ? Json<R[202]>
          : undefined
    : never;
export type BodyOf<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;
export type QueryOf<P extends keyof paths, M extends Method> = Operation<P, M> extends { parameters: { query?: infer Q } } ? Partial<NonNullable<Q>> : never;
type PathParams<P extends keyof paths, M extends Method> = Operation<P, M> extends { parameters: { path: infer Q } } ? Q : never;

export interface CallOptions<P extends keyof paths, M extends Method> {
  params?: PathParams<P, M>;
  query?: QueryOf<P, M>;
  body?: BodyOf<P, M>;
}

export interface FieldError {
  path: string;
  message: string;
}

/** A problem answered by the API (RFC 9457), with the wait of a 429. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly detail: string,
    readonly errors: FieldError[] = [],
    readonly retryAfter: number | null = null,
  ) {
    super(detail);
  }
}

/** The server could not be reached at all. */
export class NetworkError extends Error {
  constructor() {
    super('The server could not be reached. Check your connection and try again.');
  }
}

let accessToken: string | null = null;
let onSessionLost: () => void = () => {};
let onWorkspaceMoved: () => void = () => {};
let refreshing: Promise<string | null> | null = null;

/** The workspace an access token is for (its `wid` claim), or null when it cannot be read. */
export function workspaceOf(token: string | null): number | null {
  const payload = token?.split('.')[1];
  if (!payload) return null;
  try {
    const claims = JSON.parse(atob(payload.replace(/-/g, '+').replace(/_/g, '/'))) as { wid?: unknown };
    return typeof claims.wid === 'number' ? claims.wid : null;
  } catch {
    return null;
  }
}

/**
 * Called when a renewed token is for another workspace than the one this tab was showing:
 * another tab switched the session (the refresh cookie is the browser's, not the tab's).
 */
export function onWorkspaceChanged(callback: () => void): void {
  onWorkspaceMoved = callback;
}

export function setAccessToken(token: string | null): void {
  accessToken = token;
}

export function hasAccessToken(): boolean {
  return accessToken !== null;
}

/** Called when the session cannot be renewed (the refresh cookie is gone or revoked). */
export function onSessionEnded(callback: () => void): void {
  onSessionLost = callback;
}

async function readProblem(res: Response): Promise<ApiError> {
  let body: { code?: string; detail?: string; title?: string; errors?: FieldError[] } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not JSON: keep the status
  }
  const retry = Number(res.headers.get('retry-after'));
  return new ApiError(
    res.status,
    body.code ?? 'error',
    body.detail ?? body.title ?? `The server answered ${res.status}`,
    Array.isArray(body.errors) ? body.errors : [],
    Number.isFinite(retry) && retry > 0 ? retry : null,
  );
}

async function send(method: string, url: string, body: unknown, token: string | null): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetchOrFail(url, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
}

/**
 * A new access token from the refresh cookie, or null when there is no session. Tabs and
 * concurrent calls share one refresh at a time.
 */
export function refreshSession(): Promise<string | null> {
  refreshing ??= (async () => {
    try {
      const res = await send('POST', '/auth/refresh', undefined, null);
      if (res.status === 401) return null;
      if (!res.ok) throw await readProblem(res);
      const { token } = (await res.json()) as { token: string };
      accessToken = token;
      return token;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

function urlOf(path: string, params: Record<string, unknown> | undefined, query: Record<string, unknown> | undefined): string {
  const filled = path.replace(/\{(\w+)\}/g, (_, name: string) => encodeURIComponent(String(params?.[name] ?? '')));
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  const qs = search.toString();
  return qs ? `${filled}?${qs}` : filled;
}

/** Calls the API; throws ApiError for a problem, NetworkError when the server cannot be reached. */
export async function api<P extends keyof paths, M extends Method & keyof paths[P]>(method: M, path: P, opts: CallOptions<P, M> = {}): Promise<ResultOf<P, M>> {
  const url = urlOf(path as string, opts.params as Record<string, unknown> | undefined, opts.query as Record<string, unknown> | undefined);
  return request<ResultOf<P, M>>(method.toUpperCase(), url, opts.body);
}

/**
 * The untyped call under api(): for the few endpoints the committed schema does not name
 * yet. Renews the access token once on a 401.
 */
export async function request<T>(verb: string, url: string, body?: unknown): Promise<T> {
  const res = await authorized(url, (token) => send(verb, url, body, token));
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/**
 * A call made with the access token, made once more with a renewed one when it answers 401;
 * throws ApiError for a problem.
 */
async function authorized(url: string, call: (token: string | null) => Promise<Response>): Promise<Response> {
  const sent = accessToken;
  let res = await call(sent);
  // A 401 of login, of refresh or of accepting an invitation says a password (or the refresh
  // cookie) is wrong, not that this tab's session has ended.
  if (res.status === 401 && sent && !url.startsWith('/auth/login') && !url.startsWith('/auth/refresh') && !url.startsWith('/invitations/accept')) {
    const token = await refreshSession();
    if (!token) {
      accessToken = null;
      onSessionLost();
      throw await readProblem(res);
    }
    // The session now belongs to another workspace (switched in another tab): the call is not
    // made again there, where this tab's page would write or read what it does not show.
    if (workspaceOf(token) !== workspaceOf(sent)) {
      onWorkspaceMoved();
      throw new ApiError(
        409,
        'workspace_changed',
        'Another tab switched to another workspace, so nothing was done here. This tab now shows that workspace; check the page and try again.',
      );
    }
    res = await call(token);
  }
  if (!res.ok) throw await readProblem(res);
  return res;
}

async function fetchOrFail(url: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, { credentials: 'same-origin', ...init });
  } catch {
    throw new NetworkError();
  }
}

/**
 * POSTs a file as the body, as it is (the browser streams it), with its own Content-Type (and
 * Content-Encoding, for a gzip file); answers the JSON the API sends back. Sent with
 * XMLHttpRequest, which (unlike fetch) tells how much of the file has gone: `onProgress`.
 */
export async function upload<T>(url: string, file: Blob, headers: Record<string, string>, onProgress?: (sent: number, total: number) => void): Promise<T> {
  const res = await authorized(
    url,
    (token) =>
      new Promise<Response>((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        xhr.open('POST', url);
        const all: Record<string, string> = { accept: 'application/json', ...headers, ...(token ? { authorization: `Bearer ${token}` } : {}) };
        for (const [name, value] of Object.entries(all)) xhr.setRequestHeader(name, value);
        xhr.upload.onprogress = (e) => onProgress?.(e.loaded, e.lengthComputable ? e.total : file.size);
        xhr.onload = () => resolve(new Response(xhr.responseText, { status: xhr.status, headers: responseHeaders(xhr) }));
        xhr.onerror = () => reject(new NetworkError());
        xhr.onabort = () => reject(new NetworkError());
        xhr.send(file);
      }),
  );
  return (await res.json()) as T;
}

function responseHeaders(xhr: XMLHttpRequest): Headers {
  const headers = new Headers();
  for (const line of xhr
    .getAllResponseHeaders()
    .trim()
    .split(/[\r\n]+/)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  return headers;
}

/** GETs a file (an export) and hands it to the browser to save as `name`. */
export async function download(url: string, name: string): Promise<void> {
  const res = await authorized(url, (token) => fetchOrFail(url, { headers: token ? { authorization: `Bearer ${token}` } : {} }));
  const href = URL.createObjectURL(await res.blob());
  const link = document.createElement('a');
  link.href = href;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
}

/** A URL of the API with its query (empty values left out), for upload() and download(). */
export function apiUrl(path: string, query: Record<string, string | undefined> = {}): string {
  return urlOf(path, undefined, query);
}

/** A sentence for an error, for the places that show one line. */
export function describeError(err: unknown): string {
  if (err instanceof NetworkError) return err.message;
  if (err instanceof ApiError) {
    if (err.status === 429) return `Too many attempts. Try again in ${waitText(err.retryAfter)}.`;
    return err.detail;
  }
  return 'Something went wrong.';
}

export function waitText(seconds: number | null): string {
  if (!seconds) return 'a moment';
  if (seconds < 90) return `${seconds} second${seconds === 1 ? '' : 's'}`;
  const minutes = Math.ceil(seconds / 60);
  return `${minutes} minute${minutes === 1 ? '' : 's'}`;
}

/** The message of a 422's field error at this JSON Pointer ("/email"), if any. */
export function fieldError(err: unknown, pointer: string): string | undefined {
  if (!(err instanceof ApiError)) return undefined;
  const message = err.errors.find((e) => e.path === pointer || e.path.startsWith(`${pointer}/`))?.message;
  return message && message[0]!.toUpperCase() + message.slice(1);
}
