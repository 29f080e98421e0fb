/**
 * Reads of one kind asked for during one turn of the event loop, answered by one query
 * (PostgreSQL, where every query is a round trip): `load` gets the keys in the order they
 * were asked for and answers a value for each, in that order. When a load of several keys
 * fails, each key is loaded again alone, so that one key the database refuses fails only its
 * own read, not every read of its turn.
 */
export function batchLoader<K, V>(
  load: (keys: K[]) => Promise<V[]>,
  /**
   * When the batch is loaded: by default after the turn's I/O (setImmediate). A store whose
   * reads are synchronous (SQLite) takes `queueMicrotask`: the keys asked for before the
   * first await, and no turn of the event loop lost.
   */
  opts: { schedule?: (flush: () => void) => void } = {},
): (key: K) => Promise<V> {
  const schedule = opts.schedule ?? setImmediate;
  let pending: { key: K; resolve: (value: V) => void; reject: (err: unknown) => void }[] = [];
  const flush = async () => {
    const batch = pending;
    pending = [];
    try {
      const values = await load(batch.map((p) => p.key));
      batch.forEach((p, i) => p.resolve(values[i]!));
    } catch (err) {
      if (batch.length === 1) batch[0]!.reject(err);
      else for (const p of batch) load([p.key]).then(([value]) => p.resolve(value!), p.reject);
    }
  };
  return (key) =>
    new Promise<V>((resolve, reject) => {
      if (!pending.length) schedule(() => void flush());
      pending.push({ key, resolve, reject });
    });
}
