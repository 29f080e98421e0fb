import type { ReactNode } from 'react';
import { describeError } from '../api/client';

/** A message for the whole form or page; errors are announced to screen readers. */
export function Alert({ kind = 'error', children }: { kind?: 'error' | 'info' | 'success' | 'warning'; children: ReactNode }) {
  return (
    <div className={`alert alert-${kind}`} role={kind === 'error' ? 'alert' : 'status'}>
      {children}
    </div>
  );
}

export function ErrorAlert({ error }: { error: unknown }) {
  if (!error) return null;
  return <Alert>{describeError(error)}</Alert>;
}
