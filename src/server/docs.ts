import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifySchema } from 'fastify';
import { NotFoundError } from '../core/errors.js';
import { embeddedFiles } from '../core/runtime.js';
import type { App } from './app.js';

/**
 * The API reference at /docs: Swagger UI reading /openapi.json, served from the bundle's own
 * files (dist/docs, copied from swagger-ui-dist at build time), so it works on a machine with
 * no network. Running from source (tests), the files come from node_modules instead.
 */
const FILES: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'init.js': 'text/javascript; charset=utf-8',
};

/** Swagger UI sets inline styles; scripts come only from this origin (no inline script, no eval). */
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self' data:",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>svc API reference</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<main id="reference"></main>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  docExpansion: 'list',
  defaultModelsExpandDepth: 0,
  tryItOutEnabled: false,
  validatorUrl: null,
});
`;

/** Where the Swagger UI files are: beside the bundle, else in node_modules. */
function assetDir(): string | undefined {
  const here = dirname(fileURLToPath(import.meta.url));
  const bundled = join(here, 'docs');
  if (existsSync(join(bundled, 'swagger-ui-bundle.js'))) return bundled;
  try {
    return dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  } catch {
    return undefined;
  }
}

/** The reference page's files, read once (about 1.5 MB), or undefined when they are missing from this build. */
export function loadDocsAssets(dir?: string): Map<string, Buffer> | undefined {
  const files = new Map<string, Buffer>([['init.js', Buffer.from(INIT)]]);
  // The single executable carries them as assets.
  const embedded = dir === undefined ? embeddedFiles('docs') : undefined;
  if (embedded) {
    for (const name of ['swagger-ui.css', 'swagger-ui-bundle.js']) {
      const body = embedded.get(name);
      if (!body) return undefined;
      files.set(name, body);
    }
    return files;
  }
  dir ??= assetDir();
  if (!dir) return undefined;
  for (const name of ['swagger-ui.css', 'swagger-ui-bundle.js']) {
    const path = join(dir, name);
    if (!existsSync(path)) return undefined;
    files.set(name, readFileSync(path));
  }
  return files;
}

const hidden = { hide: true } as FastifySchema;

export async function docsRoutes(app: App): Promise<void> {
  const files = loadDocsAssets();
  app.get('/docs', { config: { access: 'public' }, schema: hidden }, async (_req, reply) => {
    if (!files) throw new NotFoundError('not_found', 'The reference page is not part of this build; the API document is at /openapi.json');
    return reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').header('content-security-policy', CSP).send(PAGE);
  });
  app.get<{ Params: { file: string } }>('/docs/:file', { config: { access: 'public' }, schema: hidden }, async (req, reply) => {
    const type = FILES[req.params.file];
    const body = type ? files?.get(req.params.file) : undefined;
    if (!type || !body) throw new NotFoundError('not_found', 'No such file of the reference page');
    return reply.type(type).header('cache-control', 'public, max-age=3600').header('content-security-policy', CSP).send(body);
  });
}
