/**
 * Reads of one kind asked for during one turn of the event loop, answered by one query
 * (PostgreSQL, where every query is a round trip): `load` gets the keys in the order they
 * were asked for and answers a value for each, in that order. A failed load fails every
 * read of its turn.
 */
export function batchLoader<K, V>(load: (keys: K[]) => Promise<V[]>): (key: K) => Promise<V> {
  let pending: { key: K; resolve: (value: V) => void; reject: (err: unknown) => void }[] = [];
  const flush = async () => {
    const batch = pending;
    pending = [];
    try {
      const values = await load(batch.map((p) => p.key));
      batch.forEach((p, i) => p.resolve(values[i]!));
    } catch (err) {
      for (const p of batch) p.reject(err);
    }
  };
  return (key) =>
    new Promise<V>((resolve, reject) => {
      if (!pending.length) setImmediate(() => void flush());
      pending.push({ key, resolve, reject });
    });
}
