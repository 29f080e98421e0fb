import type { IncomingMessage } from 'node:http';
import { pipeline, Readable } from 'node:stream';
import { createGzip, constants as zlibConstants } from 'node:zlib';
import { Type } from '@sinclair/typebox';
import { AppError, isIdentityEncoding } from '../../core/errors.js';
import { IMPORT_MODES, type ImportFormat } from '../../core/db/schema.js';
import {
  checkCharset,
  checkDeclaredLength,
  decompressIfGzip,
  exportContacts,
  getImport,
  listImports,
  runImport,
  startImport,
  type ImportJobView,
} from '../../core/services/contactImport.js';
import type { App } from '../app.js';
import { uploadAnsweredEarly } from '../bodyTimeout.js';
import { IdParams, Nullable, PageQuery, pageOf } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

/** Seconds a client refused for too many exports under way is told to wait. */
const TOO_MANY_EXPORTS_RETRY_AFTER = 10;

const MEDIA: Record<string, ImportFormat> = { 'application/x-ndjson': 'ndjson', 'text/csv': 'csv' };

const ImportJob = Type.Object({
  id: Type.Integer(),
  status: Type.Union([Type.Literal('RUNNING'), Type.Literal('COMPLETED'), Type.Literal('FAILED')]),
  format: Type.Union([Type.Literal('ndjson'), Type.Literal('csv')]),
  mode: Type.Union(IMPORT_MODES.map((m) => Type.Literal(m))),
  created: Type.Integer(),
  updated: Type.Integer(),
  skipped: Type.Integer(),
  errorCount: Type.Integer(),
  errors: Type.Array(Type.Object({ line: Type.Integer(), field: Nullable(Type.String()), reason: Type.String() })),
  lines: Type.Integer(),
  bytesRead: Type.Integer(),
  bytesTotal: Nullable(Type.Integer()),
  failure: Nullable(Type.Object({ code: Type.String(), detail: Type.String() })),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Nullable(Type.String()),
});

/** The import's format by its Content-Type (parameters aside), if it is one of the two. */
function mediaFormat(contentType: string | undefined): ImportFormat | undefined {
  const media = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  return Object.hasOwn(MEDIA, media) ? MEDIA[media] : undefined;
}

/** The `charset` parameter of a Content-Type, if it has one. */
function charsetOf(contentType: string | undefined): string | undefined {
  for (const param of (contentType ?? '').split(';').slice(1)) {
    const at = param.indexOf('=');
    if (at !== -1 && param.slice(0, at).trim().toLowerCase() === 'charset') return param.slice(at + 1);
  }
  return undefined;
}

function unsupportedMedia(): AppError {
  return new AppError(415, 'unsupported_media_type', 'Send the file as Content-Type: application/x-ndjson or text/csv');
}

function declaredLength(req: IncomingMessage): number | null {
  const raw = req.headers['content-length'];
  if (raw === undefined) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/**
 * Bulk import and export of contacts (issue 9.1, 9.2; API.md section 7). The import body is
 * never parsed by Fastify: NDJSON and CSV reach the service as the request stream, through
 * parsers registered in this plugin only, so the JSON routes keep their body limit and
 * parsers. Registered in app.ts.
 */
export async function contactImportRoutes(app: App): Promise<void> {
  app.addContentTypeParser(Object.keys(MEDIA), (_req, payload, done) => done(null, payload));

  // Imports still reading when the server closes are stopped at once rather than waited for
  // (an upload may take minutes, or trickle for ever): their finished batches stay committed,
  // their jobs end FAILED `interrupted`, and the store closes only after they have said so.
  const running = new Map<AbortController, { req: IncomingMessage; done: Promise<unknown> }>();
  app.addHook('preClose', (done) => {
    for (const [stop, { req }] of running) {
      stop.abort();
      if (!req.complete) req.destroy(Object.assign(new Error('the server is shutting down'), { code: 'ECONNRESET' }));
    }
    done();
  });
  app.addHook('onClose', async () => {
    await Promise.allSettled([...running.values()].map((r) => r.done));
  });
  const track = (req: IncomingMessage, run: (signal: AbortSignal) => Promise<ImportJobView>): Promise<ImportJobView> => {
    const stop = new AbortController();
    const done = run(stop.signal).finally(() => running.delete(stop));
    running.set(stop, { req, done });
    return done;
  };

  app.post(
    '/contacts/import',
    {
      config: { access: write },
      // Before the body is parsed (after the caller's access is checked): a JSON body here is
      // refused for its type, not parsed (a malformed one was 400 invalid_json, a large one 413),
      // and any other type is told which two this route takes.
      preParsing: async (req) => {
        if (!mediaFormat(req.headers['content-type'])) throw unsupportedMedia();
        checkCharset(charsetOf(req.headers['content-type']));
      },
      schema: {
        description:
          'Imports contacts from NDJSON (`application/x-ndjson`) or CSV (`text/csv`, header row), streamed, optionally gzip-compressed (`Content-Encoding: gzip`), in UTF-8 or the encoding its `charset=` names. Up to the sync size (`SVC_IMPORT_SYNC_BYTES`, declared by Content-Length) it answers 200 with the finished import; larger or unsized uploads answer 202 at once with the job, which GET /contacts/imports/:id follows. A declared length over `SVC_IMPORT_MAX_BYTES` is refused (413).',
        consumes: Object.keys(MEDIA),
        querystring: Type.Object(
          {
            mode: Type.Optional(
              Type.Union(
                IMPORT_MODES.map((m) => Type.Literal(m)),
                { default: 'upsert' },
              ),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: ImportJob, 202: ImportJob },
      },
    },
    async (req, reply) => {
      const format = mediaFormat(req.headers['content-type']);
      if (!format) throw unsupportedMedia();
      const { config } = req.workspaceCtx();
      const declared = declaredLength(req.raw);
      try {
        checkDeclaredLength(declared, config.importMaxBytes);
      } catch (err) {
        // Do not read a body that will not be used: answer and close the connection.
        reply.header('connection', 'close');
        throw err;
      }
      // After a 202 the request is no longer Node's to abort: a connection that closes before
      // the body's end must still end the read, so that the job says so.
      const socket = req.raw.socket;
      const onClose = () => {
        if (!req.raw.complete) req.raw.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
      };
      socket.once('close', onClose);
      req.raw.once('close', () => socket.off('close', onClose)); // a kept-alive socket serves other requests
      const ctx = req.workspaceCtx();
      // Content-Encoding: gzip (app.ts lets it through for this route alone): read decompressed,
      // the byte limit counting the decompressed bytes; the declared length is the compressed one.
      const gzip = req.headers['content-encoding'] !== undefined && !isIdentityEncoding(req.headers['content-encoding']);
      const opts = {
        format,
        mode: (req.query as { mode?: 'create' | 'update' | 'upsert' }).mode ?? 'upsert',
        bytesTotal: gzip ? null : declared,
        maxBytes: config.importMaxBytes,
        charset: checkCharset(charsetOf(req.headers['content-type'])),
      };
      const job = await startImport(ctx, opts);
      const body = gzip ? decompressIfGzip(req.body as Readable, { required: true }) : (req.body as Readable);
      const onError = (err: unknown) => req.log.error({ err, importId: job.id }, 'contact import failed');
      const run = () => track(req.raw, (signal) => runImport(ctx, job.id, body, opts, { onError, signal }));
      if (declared !== null && declared <= config.importSyncBytes) {
        const done = await run();
        if (done.failure?.code === 'import_too_large') {
          // A small body that inflated past the limit: the batches before it are committed, so
          // the answer names the job that holds their counts (Location, and `importId`).
          reply.header('connection', 'close');
          throw new AppError(413, 'import_too_large', `${done.failure.detail}; the rows before it were committed (import ${done.id})`, {
            headers: { location: `/contacts/imports/${done.id}` },
            extensions: { importId: done.id },
          });
        }
        // A body not read to its end (a file that failed early) cannot be followed by another
        // request on this connection: closed after the answer.
        if (!req.raw.complete) reply.header('connection', 'close');
        return reply.code(200).send(done);
      }
      // A large or unsized upload: reading starts now (before the answer), and goes on after
      // the 202; the job records progress and the outcome.
      void run().then(
        (done) => {
          // Stop an upload that will not be read further. The parser has let go of the request
          // stream, but the connection, which Node no longer ties to a request answered early,
          // stayed open while the client went on sending, until the body timeout cut it (30 s
          // of a failed upload): closed once the 202 is out.
          if (done.status === 'FAILED' && !req.raw.complete) {
            req.raw.destroy();
            if (reply.raw.writableFinished) socket.destroy();
            else reply.raw.once('finish', () => socket.destroy());
          }
        },
        (err: unknown) => onError(err),
      );
      // The rest of the upload keeps the body timeout after the 202 (server/bodyTimeout.ts).
      uploadAnsweredEarly(req.raw, reply.raw, config.bodyTimeoutSeconds * 1000);
      return reply.code(202).header('location', `/contacts/imports/${job.id}`).send(job);
    },
  );

  app.get(
    '/contacts/imports',
    { config: { access: read }, schema: { querystring: Type.Object(PageQuery, { additionalProperties: false }), response: { 200: pageOf(ImportJob) } } },
    async (req) => listImports(req.workspaceCtx(), req.query),
  );

  app.get('/contacts/imports/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: ImportJob } } }, async (req) =>
    getImport(req.workspaceCtx(), req.params.id),
  );

  /** Exports streaming now, by workspace (SVC_EXPORT_CONCURRENCY). */
  const exporting = new Map<number, number>();
  app.get(
    '/contacts/export',
    {
      config: { access: read },
      schema: {
        description:
          'The contacts (with the list filters), newest first, streamed as NDJSON (one contact a line) or CSV (header row; tags joined with `;`; attributes as a JSON object; a cell a spreadsheet would run as a formula, one starting with `=`, `+`, `-`, `@`, a tab or a carriage return other than a signed number, is written after an apostrophe, which the import takes off), gzip-compressed (`Content-Encoding: gzip`) when the request Accept-Encoding takes it. Both import back.',
        produces: ['application/x-ndjson', 'text/csv'],
        querystring: Type.Object(
          {
            format: Type.Union([Type.Literal('ndjson'), Type.Literal('csv')], { default: 'ndjson' }),
            tag: Type.Optional(Type.String({ maxLength: 64 })),
            email: Type.Optional(Type.String({ maxLength: 320 })),
            phone: Type.Optional(Type.String({ maxLength: 64 })),
            q: Type.Optional(Type.String({ maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.String({ description: 'NDJSON or CSV' }) },
      },
    },
    async (req, reply) => {
      const { format, ...filter } = req.query as { format: 'ndjson' | 'csv'; tag?: string; email?: string; phone?: string; q?: string };
      const ctx = req.workspaceCtx();
      // Each export holds a page of contacts and its connection for as long as its reader takes
      // (a reader that stops holds them until it goes away): a few at once per workspace.
      const streaming = exporting.get(ctx.workspaceId) ?? 0;
      const limit = ctx.config.exportConcurrency;
      if (streaming >= limit) {
        throw new AppError(
          429,
          'too_many_exports',
          `This workspace already has ${limit} export${limit === 1 ? '' : 's'} under way on this server; retry once one has finished`,
          { headers: { 'retry-after': String(TOO_MANY_EXPORTS_RETRY_AFTER) } },
        );
      }
      exporting.set(ctx.workspaceId, streaming + 1);
      reply.raw.once('close', () => {
        const n = (exporting.get(ctx.workspaceId) ?? 1) - 1;
        if (n > 0) exporting.set(ctx.workspaceId, n);
        else exporting.delete(ctx.workspaceId);
      });
      let stream: Readable = Readable.from(exportContacts(ctx, format, filter));
      // A client that takes gzip (browsers, most HTTP libraries) gets it: a CSV of a million
      // contacts is about a fifth the size. The fastest level: the server's CPU, not the
      // ratio, is what an export competes for. Back-pressure passes through the compressor.
      reply.header('vary', 'accept-encoding');
      if (acceptsGzip(req.headers['accept-encoding'])) {
        stream = pipeline(stream, createGzip({ level: zlibConstants.Z_BEST_SPEED }), () => {});
        reply.header('content-encoding', 'gzip');
      }
      return reply
        .type(format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson; charset=utf-8')
        .header('content-disposition', `attachment; filename="contacts.${format}"`)
        .send(stream as unknown as string); // a stream is sent as it is, never serialised
    },
  );
}

/**
 * Whether to answer gzip-compressed for an Accept-Encoding header (RFC 9110, 12.5.3): gzip named
 * with a q above 0, or `*` so, without gzip itself refused; and not ranked below identity
 * (`gzip;q=0.5, identity;q=1` asks for the body as it is).
 */
export function acceptsGzip(header: string | undefined): boolean {
  if (!header) return false;
  let gzip: number | undefined;
  let star: number | undefined;
  let identity: number | undefined;
  for (const part of header.toLowerCase().split(',')) {
    const [coding, ...params] = part.split(';').map((p) => p.trim());
    const q = params.find((p) => p.startsWith('q='));
    const parsed = q === undefined ? 1 : Number(q.slice(2));
    const weight = Number.isFinite(parsed) ? parsed : 0;
    if (coding === 'gzip' || coding === 'x-gzip') gzip ??= weight;
    else if (coding === '*') star ??= weight;
    else if (coding === 'identity') identity ??= weight;
  }
  const wanted = gzip ?? star ?? 0;
  return wanted > 0 && (identity === undefined || wanted >= identity);
}
