// Who is signed in: the user, the workspace and its role, the other workspaces they belong
// to. The access token lives in the API client's memory; a reload asks the refresh cookie.
import { useQueryClient } from '@tanstack/react-query';
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from 'react';
import { api, onSessionEnded, onWorkspaceChanged, refreshSession, request, setAccessToken, type ResultOf } from '../api/client';

export type Role = 'VIEWER' | 'MEMBER' | 'ADMIN' | 'OWNER';
const ROLE_ORDER: Role[] = ['VIEWER', 'MEMBER', 'ADMIN', 'OWNER'];

/** Who is signed in: GET /auth/me (the console signs in people, never API keys). */
export type Me = Omit<ResultOf<'/auth/me', 'get'>, 'user' | 'apiKey'> & { user: NonNullable<ResultOf<'/auth/me', 'get'>['user']> };

async function whoAmI(): Promise<Me> {
  const me = await api('get', '/auth/me');
  if (!me.user) throw new Error("The console needs a person's session, not an API key");
  return { ...me, user: me.user };
}

type State = { status: 'loading' } | { status: 'anonymous'; reason?: string } | { status: 'signed-in'; me: Me };

interface SessionApi {
  state: State;
  logIn(email: string, password: string): Promise<void>;
  /** Signs in with an answer shaped like login's (accepting an invitation answers so). */
  signedIn(answer: { token: string }): Promise<void>;
  logOut(): Promise<void>;
  switchWorkspace(workspaceId: number): Promise<void>;
}

const SessionContext = createContext<SessionApi | null>(null);

export function roleAtLeast(role: Role, needed: Role): boolean {
  return ROLE_ORDER.indexOf(role) >= ROLE_ORDER.indexOf(needed);
}

export function SessionProvider({ children }: { children: ReactNode }) {
  const queries = useQueryClient();
  const [state, setState] = useState<State>({ status: 'loading' });

  const end = useCallback(
    (reason?: string) => {
      setAccessToken(null);
      queries.clear();
      setState(reason ? { status: 'anonymous', reason } : { status: 'anonymous' });
    },
    [queries],
  );

  useEffect(() => {
    onSessionEnded(() => end('Your session has ended. Log in again.'));
    // Another tab switched workspace: show the one the session is in now, with its own data.
    onWorkspaceChanged(() => {
      // Queries only: the failed call's own error stays on its page (clear() would drop mutations).
      void queries.resetQueries();
      whoAmI().then(
        (me) => setState({ status: 'signed-in', me }),
        () => end('Your session has ended. Log in again.'),
      );
    });
    let live = true;
    refreshSession()
      .then(async (token) => {
        if (!token) return live && setState({ status: 'anonymous' });
        const me = await whoAmI();
        if (live) setState({ status: 'signed-in', me });
      })
      .catch(() => live && setState({ status: 'anonymous' }));
    return () => {
      live = false;
    };
  }, [end, queries]);

  const value = useMemo<SessionApi>(
    () => ({
      state,
      async logIn(email, password) {
        const answer = await api('post', '/auth/login', { body: { email, password } });
        setAccessToken(answer.token);
        setState({ status: 'signed-in', me: await whoAmI() });
      },
      async signedIn(answer) {
        setAccessToken(answer.token);
        setState({ status: 'signed-in', me: await whoAmI() });
      },
      async logOut() {
        try {
          await request('POST', '/auth/logout');
        } finally {
          end();
        }
      },
      async switchWorkspace(workspaceId) {
        const answer = await api('post', '/auth/switch', { body: { workspaceId } });
        setAccessToken(answer.token);
        queries.clear();
        setState({ status: 'signed-in', me: await whoAmI() });
      },
    }),
    [state, end, queries],
  );
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): SessionApi {
  const value = useContext(SessionContext);
  if (!value) throw new Error('useSession outside SessionProvider');
  return value;
}

/** The signed-in caller; only for pages behind the sign-in. */
export function useMe(): Me {
  const { state } = useSession();
  if (state.status !== 'signed-in') throw new Error('useMe while not signed in');
  return state.me;
}

/** Whether the caller's role allows this (the API enforces it anyway). */
export function useCan(needed: Role): boolean {
  return roleAtLeast(useMe().role, needed);
}
