/**
 * One writer at a time within this process, across the main thread and the engine's worker
 * threads, without SQLite's busy handler: that one sleeps in growing steps (up to 100 ms)
 * when the write lock is taken, which under load cost more than the writes. This lock
 * wakes the next writer the moment the previous one commits (Atomics.notify). Other
 * processes sharing the database still meet SQLite's own locking and busy_timeout.
 */
export class WriteLock {
  private readonly cell: Int32Array;

  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(4)) {
    this.cell = new Int32Array(buffer);
  }

  acquire(): void {
    while (Atomics.compareExchange(this.cell, 0, 0, 1) !== 0) Atomics.wait(this.cell, 0, 1, 100);
  }

  release(): void {
    Atomics.store(this.cell, 0, 0);
    Atomics.notify(this.cell, 0, 1);
  }
}

let processLock: WriteLock | undefined;

/** The lock every top-level write transaction of this thread takes (none until set). */
export function setProcessWriteLock(lock: WriteLock | undefined): void {
  processLock = lock;
}

export function processWriteLock(): WriteLock | undefined {
  return processLock;
}
