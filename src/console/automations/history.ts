import { useCallback, useState } from 'react';

/** Past and future states around the present one (undo/redo). */
interface History<T> {
  past: T[];
  present: T;
  future: T[];
  /** The last change's coalescing key: typing in one field is one step, not one per key. */
  key: string | null;
}

const LIMIT = 200;

export interface HistoryApi<T> {
  present: T;
  canUndo: boolean;
  canRedo: boolean;
  /**
   * A new present from the current one. `coalesce`: a change with the same key as the
   * last one replaces it in the history; `transient`: no history entry (a drag in progress,
   * closed by checkpoint()).
   */
  change(fn: (present: T) => T, opts?: { coalesce?: string; transient?: boolean }): void;
  /** Records `before` as the state preceding the present one (the start of a drag). */
  checkpoint(before: T): void;
  undo(): void;
  redo(): void;
}

export function useHistory<T>(initial: () => T): HistoryApi<T> {
  const [h, setH] = useState<History<T>>(() => ({ past: [], present: initial(), future: [], key: null }));
  const change = useCallback((fn: (present: T) => T, opts: { coalesce?: string; transient?: boolean } = {}) => {
    setH((h) => {
      const next = fn(h.present);
      if (next === h.present) return h;
      if (opts.transient) return { ...h, present: next };
      if (opts.coalesce !== undefined && opts.coalesce === h.key) return { ...h, present: next, future: [] };
      return { past: [...h.past, h.present].slice(-LIMIT), present: next, future: [], key: opts.coalesce ?? null };
    });
  }, []);
  const checkpoint = useCallback((before: T) => {
    setH((h) => (before === h.present ? h : { past: [...h.past, before].slice(-LIMIT), present: h.present, future: [], key: null }));
  }, []);
  const undo = useCallback(() => {
    setH((h) => {
      const previous = h.past[h.past.length - 1];
      if (previous === undefined) return h;
      return { past: h.past.slice(0, -1), present: previous, future: [h.present, ...h.future], key: null };
    });
  }, []);
  const redo = useCallback(() => {
    setH((h) => {
      const [next, ...rest] = h.future;
      if (next === undefined) return h;
      return { past: [...h.past, h.present], present: next, future: rest, key: null };
    });
  }, []);
  return { present: h.present, canUndo: h.past.length > 0, canRedo: h.future.length > 0, change, checkpoint, undo, redo };
}
