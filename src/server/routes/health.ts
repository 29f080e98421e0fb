import { Type } from '@sinclair/typebox';
import { storeSchemaVersion } from '../../core/db/dialect.js';
import type { Store } from '../../core/db/store.js';
import { VERSION } from '../../core/version.js';
import type { App } from '../app.js';
import { Problem } from '../openapi.js';
import { problem, sendProblem, STORAGE_FULL_RETRY_AFTER } from '../plugins/errors.js';
import type { Readiness } from '../readiness.js';

const Checks = Type.Object({
  migrations: Type.Union([Type.Literal('applied'), Type.Literal('pending'), Type.Literal('unknown')]),
  engine: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('off')], { description: 'off: this node runs no engine' }),
  storage: Type.Union([Type.Literal('ok'), Type.Literal('full'), Type.Literal('failing')]),
  redis: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('off')], {
    description:
      'off: no redisUrl. down: Redis does not answer; the node stays ready and counts the limits shared across nodes on its own until it answers again',
  }),
});

const Versions = {
  version: Type.String({ description: 'The version of svc' }),
  schemaVersion: Type.Union([Type.String(), Type.Null()], { description: 'The latest migration applied to the database' }),
};

export async function healthRoutes(app: App, opts: { store: Store; readiness: Readiness }): Promise<void> {
  app.get(
    '/healthz',
    {
      config: { access: 'public' },
      schema: { response: { 200: Type.Object({ status: Type.Literal('ok'), ...Versions }) } },
    },
    async () => ({ status: 'ok' as const, version: VERSION, schemaVersion: await storeSchemaVersion(opts.store) }),
  );

  app.get(
    '/readyz',
    {
      config: { access: 'public' },
      schema: {
        summary: 'Readiness: whether this node should be sent traffic',
        description:
          '200 once migrations ran, the run engine is up (on a node that runs it) and the database took a write; 503 while starting, while shutting down (`shutting_down`) and while the disk is full (`storage_full`, with Retry-After).',
        response: {
          200: Type.Object({ status: Type.Literal('ready'), ...Versions, checks: Checks }),
          503: Type.Intersect([Problem, Type.Object({ checks: Type.Optional(Checks) })]),
        },
      },
    },
    async (_req, reply) => {
      const report = await opts.readiness.check();
      if (report.ready) return { status: 'ready' as const, version: VERSION, schemaVersion: await storeSchemaVersion(opts.store), checks: report.checks };
      return sendProblem(reply, { ...problem(503, report.code ?? 'not_ready', report.detail), checks: report.checks } as ReturnType<typeof problem>, {
        'retry-after': String(report.code === 'storage_full' ? STORAGE_FULL_RETRY_AFTER : 5),
        'cache-control': 'no-store',
      });
    },
  );
}
