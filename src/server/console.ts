import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyReply, FastifyRequest, FastifySchema } from 'fastify';
import { embeddedFiles } from '../core/runtime.js';
import type { App } from './app.js';
import { problem, sendProblem } from './plugins/errors.js';

/**
 * The web console (issue 11): a single-page app built by build.mjs into dist/console and
 * served here. Client routes live under /app/ (API paths have no prefix, so a reload on
 * /app/contacts can never reach the API by mistake); /invite is the invitation page.
 * Every file is read into memory once at start.
 */

/** One built file, ready to send. */
export interface ConsoleFile {
  body: Buffer;
  /** The gzip-compressed body, when compressing saves something. */
  gzip: Buffer | undefined;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
  '.map': 'application/json',
  '.json': 'application/json',
};

/**
 * Where the built console is: beside the bundle (dist/svc.js → dist/console) or, when
 * running from source (src/server/console.ts), in the repository's dist/console.
 */
export function defaultConsoleDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const besideBundle = join(here, 'console');
  return existsSync(join(besideBundle, 'index.html')) ? besideBundle : join(here, '..', '..', 'dist', 'console');
}

/**
 * The console's files by their path under the console folder ("index.html",
 * "assets/main-3F2A.js"), or null when the console is not built. This is the one place
 * that reads them, so that a single executable can read its embedded assets here instead.
 */
export function readConsoleFiles(dir?: string): Map<string, ConsoleFile> | null {
  // The single executable carries them as assets.
  const embedded = dir === undefined ? embeddedFiles('console') : undefined;
  if (embedded) return embedded.has('index.html') ? new Map([...embedded].map(([path, body]) => [path, consoleFile(path, body)])) : null;
  dir ??= defaultConsoleDir();
  const index = join(dir, 'index.html');
  if (!existsSync(index)) return null;
  // Compressing every file at level 9 takes a while: a process that builds several apps
  // (tests, a cluster benchmark) reads a folder again only when its build is newer.
  const built = statSync(index).mtimeMs;
  const cached = readFolders.get(dir);
  if (cached?.built === built) return cached.files;
  const files = new Map<string, ConsoleFile>();
  const walk = (folder: string) => {
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      const full = join(folder, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.isFile()) files.set(relative(dir, full).split(sep).join('/'), consoleFile(entry.name, readFileSync(full)));
    }
  };
  walk(dir);
  readFolders.set(dir, { built, files });
  return files;
}

const readFolders = new Map<string, { built: number; files: Map<string, ConsoleFile> }>();

export function consoleFile(name: string, body: Buffer): ConsoleFile {
  const type = TYPES[extname(name)] ?? 'application/octet-stream';
  const compressible = /^(text\/|application\/json|image\/svg)/.test(type) && body.length > 256;
  const gzip = compressible ? gzipSync(body, { level: 9 }) : undefined;
  return {
    body,
    gzip: gzip && gzip.length < body.length ? gzip : undefined,
    type,
    etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`,
  };
}

/**
 * No inline script or style element, nothing from elsewhere, never framed. React and React
 * Flow set styles through the CSSOM, which style-src does not govern.
 */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const CONSOLE_HEADERS = {
  'content-security-policy': CONSOLE_CSP,
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

let source: Map<string, ConsoleFile> | null | undefined;

/**
 * Where every app built after this call takes the console's files from, instead of
 * dist/console: a single executable passes its embedded assets, tests a build of their own.
 */
export function setConsoleSource(files: Map<string, ConsoleFile> | null): void {
  source = files;
}

const NOT_BUILT_PAGE = Buffer.from(
  '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>svc console</title></head>' +
    '<body><h1>The console is not built</h1><p>Run <code>npm run build</code> and restart the server. The API works without it.</p></body></html>',
);

const hidden = { hide: true } as FastifySchema;
// `page`: the console's own HTML, whose query string is the console's to read (a search box's
// `?q=%` is no API query, so it is not refused as one).
const route = { config: { access: 'public' as const, page: true }, schema: hidden };

export async function consoleRoutes(app: App, opts: { files?: Map<string, ConsoleFile> | null } = {}): Promise<void> {
  const files = opts.files !== undefined ? opts.files : source !== undefined ? source : readConsoleFiles();
  if (!files) app.log.warn('the web console is not built (dist/console is missing): /app/ explains how to build it');

  function send(req: FastifyRequest, reply: FastifyReply, file: ConsoleFile, cache: string): FastifyReply {
    reply.headers(CONSOLE_HEADERS).header('cache-control', cache).header('etag', file.etag).header('vary', 'accept-encoding').type(file.type);
    if (req.headers['if-none-match'] === file.etag) return reply.code(304).send();
    if (file.gzip && /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''))) return reply.header('content-encoding', 'gzip').send(file.gzip);
    return reply.send(file.body);
  }

  /** The app's page: every client route answers it, and the app reads the path. */
  function page(req: FastifyRequest, reply: FastifyReply): FastifyReply {
    const index = files?.get('index.html');
    if (!index) return reply.code(503).headers(CONSOLE_HEADERS).header('cache-control', 'no-store').type('text/html; charset=utf-8').send(NOT_BUILT_PAGE);
    return send(req, reply, index, 'no-cache');
  }

  app.get('/', route, async (_req, reply) => reply.redirect('/app/', 302));
  app.get('/app', route, async (_req, reply) => reply.redirect('/app/', 302));
  app.get('/app/*', route, async (req, reply) => page(req, reply));
  app.get('/invite', route, async (req, reply) => page(req, reply));
  // Asset names carry a hash of their content, so they can be cached for good.
  app.get('/app/assets/*', route, async (req, reply) => {
    const name = (req.params as { '*': string })['*'];
    const file = files?.get(`assets/${name}`);
    if (!file) return sendProblem(reply.headers(CONSOLE_HEADERS), problem(404, 'not_found', 'No console file has this name'));
    return send(req, reply, file, 'public, max-age=31536000, immutable');
  });
}
