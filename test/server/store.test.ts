import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { openDatabase } from '../../src/core/db/connection.js';
import { migrate } from '../../src/core/db/migrate.js';
import { migratePg } from '../../src/core/db/pgMigrate.js';
import { contacts, users, workspaceCounters, workspaces } from '../../src/core/db/schema.js';
import { openPgStore, openSqliteStore, type Store } from '../../src/core/db/store.js';
import { tempDir } from '../helpers.js';
import { createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';

/** A migrated store of each kind, closed when the test ends. */
const stores: Record<'sqlite' | 'pg', { skipOutsideCI: string | false; open(t: TestContext): Promise<Store> }> = {
  sqlite: {
    skipOutsideCI: false,
    async open(t) {
      const file = join(tempDir(t), 'svc.db');
      const db = openDatabase(file);
      migrate(db);
      db.$client.close();
      const store = openSqliteStore(file);
      t.after(() => store.close());
      return store;
    },
  },
  pg: {
    skipOutsideCI: skipOutsideCIWithoutPostgres(),
    async open(t) {
      const url = await createTestDatabase(t);
      await migratePg(url);
      const store = openPgStore(url, { poolSize: 5 });
      t.after(() => store.close());
      return store;
    },
  },
};

const tick = () => new Promise((r) => setImmediate(r));

async function newWorkspace(store: Store, name = 'W'): Promise<number> {
  return store.transaction(async (tx) => {
    const [row] = await tx.insert(workspaces).values({ name }).returning({ id: workspaces.id });
    return row!.id;
  });
}

for (const [dialect, kind] of Object.entries(stores)) {
  describe(`store: ${dialect}`, { skip: kind.skipOutsideCI }, () => {
    test('rows come back as the same JavaScript values on both stores', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store, 'Values');
      const [user] = await store.transaction((tx) => tx.insert(users).values({ email: 'v@example.com', isSuperAdmin: true }).returning());
      assert.equal(typeof user!.id, 'number');
      assert.equal(user!.isSuperAdmin, true);
      assert.match(user!.createdAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, 'timestamps are ISO 8601 UTC text, as the API prints them');
      await store.transaction((tx) =>
        tx.insert(contacts).values({ workspaceId: ws, email: 'c@example.com', attributes: { plan: 'pro', seats: 3, tags: ['a'] } }),
      );
      const [contact] = await store.db.select().from(contacts).where(eq(contacts.workspaceId, ws));
      assert.deepEqual(contact!.attributes, { plan: 'pro', seats: 3, tags: ['a'] });
      assert.equal(typeof contact!.workspaceId, 'number');
      const [counter] = await store.db.select().from(workspaceCounters).where(eq(workspaceCounters.workspaceId, ws));
      assert.equal(counter!.contacts, 1, 'the counter trigger counted the contact');
    });

    test('concurrent read-modify-write transactions never lose an update', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store, '0');
      await Promise.all(
        Array.from({ length: 25 }, () =>
          store.transaction(async (tx) => {
            const [row] = await tx.select({ name: workspaces.name }).from(workspaces).where(eq(workspaces.id, ws));
            await tick(); // give every other transaction the chance to interleave
            await tx
              .update(workspaces)
              .set({ name: String(Number(row!.name) + 1) })
              .where(eq(workspaces.id, ws));
          }),
        ),
      );
      const [row] = await store.db.select({ name: workspaces.name }).from(workspaces).where(eq(workspaces.id, ws));
      assert.equal(row!.name, '25');
    });

    test('a transaction that throws leaves nothing behind and passes the error on', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store);
      await assert.rejects(
        store.transaction(async (tx) => {
          await tx.insert(contacts).values({ workspaceId: ws, email: 'gone@example.com' });
          throw new Error('refused');
        }),
        /refused/,
      );
      assert.equal((await store.db.select().from(contacts).where(eq(contacts.workspaceId, ws))).length, 0);
      // The store is usable afterwards.
      await store.transaction((tx) => tx.insert(contacts).values({ workspaceId: ws, email: 'kept@example.com' }));
      assert.equal((await store.db.select().from(contacts).where(eq(contacts.workspaceId, ws))).length, 1);
    });

    test('of transactions started together, one that fails is undone alone; the others commit', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store);
      const results = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) =>
          store.transaction(async (tx) => {
            await tx.insert(contacts).values({ workspaceId: ws, email: `c${i}@example.com` });
            if (i === 4) throw new Error('number 4 refused');
            return i;
          }),
        ),
      );
      assert.deepEqual(
        results.map((r) => r.status),
        results.map((_, i) => (i === 4 ? 'rejected' : 'fulfilled')),
      );
      const emails = (await store.db.select({ email: contacts.email }).from(contacts).where(eq(contacts.workspaceId, ws))).map((r) => r.email).sort();
      assert.deepEqual(emails, [0, 1, 2, 3, 5, 6, 7, 8, 9].map((i) => `c${i}@example.com`).sort());
    });

    test('work a transaction started and left running is not part of it once it ended', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store);
      let later!: Promise<unknown>;
      let started!: () => void;
      const timerRan = new Promise<void>((r) => {
        started = r;
      });
      await store.transaction(async (tx) => {
        await tx.insert(contacts).values({ workspaceId: ws, email: 'inside@example.com' });
        // Fires after this transaction ended, in a context that was created inside it.
        setTimeout(() => {
          later = store.transaction((t2) => t2.insert(contacts).values({ workspaceId: ws, email: 'later@example.com' }));
          started();
        }, 20);
      });
      await timerRan;
      await later;
      const emails = (await store.db.select({ email: contacts.email }).from(contacts).where(eq(contacts.workspaceId, ws))).map((r) => r.email).sort();
      assert.deepEqual(emails, ['inside@example.com', 'later@example.com'], 'the late transaction is one of its own, committed');
    });

    test('a transaction inside another is a savepoint: its failure undoes only its own writes', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store);
      await store.transaction(async (tx) => {
        await tx.insert(contacts).values({ workspaceId: ws, email: 'outer@example.com' });
        await assert.rejects(
          store.transaction(async (inner) => {
            await inner.insert(contacts).values({ workspaceId: ws, email: 'inner@example.com' });
            throw new Error('inner refused');
          }),
          /inner refused/,
        );
        await store.transaction((inner) => inner.insert(contacts).values({ workspaceId: ws, email: 'second@example.com' }));
      });
      const emails = (await store.db.select({ email: contacts.email }).from(contacts).where(eq(contacts.workspaceId, ws))).map((r) => r.email).sort();
      assert.deepEqual(emails, ['outer@example.com', 'second@example.com']);
    });

    test('reads outside a transaction never see what an open one has not committed; ctx.db inside it is the transaction', async (t) => {
      const store = await kind.open(t);
      const ws = await newWorkspace(store);
      const count = async () => (await store.db.select().from(contacts).where(eq(contacts.workspaceId, ws))).length;
      let written!: () => void;
      const inserted = new Promise<void>((r) => {
        written = r;
      });
      let readDone!: () => void;
      const outsideRead = new Promise<void>((r) => {
        readDone = r;
      });
      let seenOutside: number | undefined;
      // Another call chain, outside the transaction, reads while the transaction is open.
      const reader = (async () => {
        await inserted;
        seenOutside = await count();
        readDone();
      })();
      let seenInside: number | undefined;
      await store.transaction(async (tx) => {
        await tx.insert(contacts).values({ workspaceId: ws, email: 'open@example.com' });
        seenInside = await count(); // store.db, inside the transaction's call chain
        written();
        await outsideRead;
      });
      await reader;
      assert.equal(seenInside, 1);
      assert.equal(seenOutside, 0);
      assert.equal(
        (
          await store.db
            .select()
            .from(contacts)
            .where(and(eq(contacts.workspaceId, ws), eq(contacts.email, 'open@example.com')))
        ).length,
        1,
      );
    });
  });
}

describe('store: sqlite only', () => {
  test('a write outside a transaction is refused instead of joining another caller’s', async (t) => {
    const store = await stores.sqlite.open(t);
    await assert.rejects(async () => store.db.insert(workspaces).values({ name: 'stray' }), /readonly|read-only|query_only|attempt to write/i);
  });
});
