import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { ApiError, NetworkError } from './api/client';
import { App } from './app/App';
import { SessionProvider } from './app/session';
import './styles.css';
import './automations/automations.css';
import './workflows/workflows.css';
import './settings/settings.css';
import './contacts/contacts.css';

const queries = new QueryClient({
  defaultOptions: {
    queries: {
      staleTime: 5_000,
      // Retry what may pass on a second try (the network, a 5xx), never a 4xx.
      retry: (count, err) => count < 2 && (err instanceof NetworkError || (err instanceof ApiError && err.status >= 500)),
    },
  },
});

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <QueryClientProvider client={queries}>
      <SessionProvider>
        <App />
      </SessionProvider>
    </QueryClientProvider>
  </StrictMode>,
);
