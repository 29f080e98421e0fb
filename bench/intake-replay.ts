// What an accepted webhook writes, replayed without HTTP through the real intake
// (db/intake.ts, through the WriteBatcher on the store's writer): its workflow and contact
// read, its run and its event written. For bench:batch and bench:wal, on a copy of
// bench:webhook's database (its workflow and its contact carol@example.net).
import { WriteBatcher } from '../src/core/db/batcher.js';
import { sqliteIntake, stmt } from '../src/core/db/intake.js';
import type { SqliteStore } from '../src/core/db/store.js';
import { WEBHOOK_BODY } from './lib.js';

export function replayIntake(store: SqliteStore) {
  const c = store.writer.$client;
  const {
    workspace_id: workspaceId,
    id: workflowId,
    steps,
  } = c.prepare('SELECT workspace_id, id, steps FROM workflows LIMIT 1').get() as {
    workspace_id: number;
    id: number;
    steps: string;
  };
  const { id: contactId } = c.prepare('SELECT id FROM contacts WHERE workspace_id = ? LIMIT 1').get(workspaceId) as { id: number };
  const batcher = new WriteBatcher(store);
  const intake = sqliteIntake(store, batcher);
  const body = Buffer.from(WEBHOOK_BODY);
  /** One accepted request; those queued in one turn of the event loop commit together (one fsync). */
  const accept = () =>
    intake.run(function* () {
      yield* stmt((s) => s.workflowById(workflowId));
      const found = yield* stmt((s) => s.contactId(workspaceId, 'email', 'carol@example.net'));
      const runId = yield* stmt((s) => s.insertRun(workspaceId, workflowId, found ?? contactId, steps, WEBHOOK_BODY));
      yield* stmt((s) =>
        s.insertEvent({
          workspaceId,
          workflowId,
          statusCode: 202,
          code: null,
          runId,
          contactId: found ?? contactId,
          sourceIp: '127.0.0.1',
          contentType: 'application/json',
          idempotencyKey: null,
          body,
          bodySize: body.length,
          bodySha256: null,
          replayOf: null,
        }),
      );
      return runId;
    });
  const close = async () => {
    await batcher.close();
    await intake.close();
  };
  return { workspaceId, workflowId, batcher, accept, close };
}
