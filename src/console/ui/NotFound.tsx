import type { ReactNode } from 'react';
import { Page } from './Page';

/** An id from the address: a positive whole number, or null for anything else ("abc", "0", "1.5"). */
export function idOf(text: string | undefined): number | null {
  if (!text || !/^[1-9]\d{0,14}$/.test(text)) return null;
  return Number(text);
}

/** The page for an address that names nothing (as the app's own "Page not found"), asking the API nothing. */
export function NotFoundPage({ children }: { children?: ReactNode }) {
  return (
    <Page title="Page not found">
      <p>There is no page at this address.</p>
      {children}
    </Page>
  );
}
