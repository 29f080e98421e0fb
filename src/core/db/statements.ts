/**
 * Rules written once for both stores (docs/stores.md): a hot path's logic is a generator that
 * yields one statement at a time against an interface of statements `S`. SQLite's
 * implementation answers plain values from prepared statements, and the generator runs
 * synchronously inside its batch (one await per batch, none per row); PostgreSQL's answers
 * promises, each awaited on the batch's connection.
 */

export type Maybe<T> = T | Promise<T>;

/** A statement to run, as the generators yield it. */
export type Statement<S> = (sql: S) => unknown;
/** The statements of one job, and what it answers. */
export type Job<S, T> = Generator<Statement<S>, T, unknown>;

/** Yields one statement and gives back its result (typed): `const row = yield* stmt((s: Sql) => s.byId(id))`. */
export function* stmt<S, T>(statement: (sql: S) => T): Generator<Statement<S>, Awaited<T>, unknown> {
  return (yield statement as Statement<S>) as Awaited<T>;
}

/** Runs a job's statements synchronously (SQLite, inside the batch). */
export function runSync<S, T>(job: Job<S, T>, sql: S): T {
  let step = job.next();
  while (!step.done) {
    let value: unknown;
    try {
      value = step.value(sql);
    } catch (err) {
      step = job.throw(err);
      continue;
    }
    step = job.next(value);
  }
  return step.value;
}

/** Runs a job's statements one await each (PostgreSQL). */
export async function runAsync<S, T>(job: Job<S, T>, sql: S): Promise<T> {
  let step = job.next();
  while (!step.done) {
    let value: unknown;
    try {
      value = await step.value(sql);
    } catch (err) {
      step = job.throw(err);
      continue;
    }
    step = job.next(value);
  }
  return step.value;
}

/** Applies f to a value that may be a promise: synchronously when it is not (SQLite's statements). */
export function then<T, R>(value: Maybe<T>, f: (v: T) => R): Maybe<R> {
  return value instanceof Promise ? value.then(f) : f(value);
}
