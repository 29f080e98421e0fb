import { useState, type ReactNode } from 'react';
import { Link, useLocation } from 'wouter';
import { describeError } from '../api/client';
import { ErrorBoundary } from './ErrorBoundary';
import { useMe, useSession } from './session';

const SECTIONS = [
  { href: '/contacts', label: 'Contacts' },
  { href: '/templates', label: 'Templates' },
  { href: '/automations', label: 'Automations' },
  { href: '/workflows', label: 'Workflows' },
  { href: '/runs', label: 'Runs' },
  { href: '/deliveries', label: 'Deliveries' },
  { href: '/settings', label: 'Settings' },
];

function NavLink({ href, label }: { href: string; label: string }) {
  const [location] = useLocation();
  const active = location === href || location.startsWith(`${href}/`);
  return (
    <li>
      <Link href={href} className={active ? 'active' : undefined} aria-current={active ? 'page' : undefined}>
        {label}
      </Link>
    </li>
  );
}

function WorkspaceSwitcher() {
  const me = useMe();
  const { switchWorkspace } = useSession();
  const [error, setError] = useState<unknown>(null);
  if (me.memberships.length < 2) return <span className="workspace-name">{me.workspace.name}</span>;
  return (
    <div className="workspace-switcher">
      <label htmlFor="workspace-switcher">Workspace</label>
      <select
        id="workspace-switcher"
        value={me.workspace.id}
        onChange={(e) => {
          setError(null);
          switchWorkspace(Number(e.target.value)).catch(setError);
        }}
      >
        {me.memberships.map((m) => (
          <option key={m.workspaceId} value={m.workspaceId}>
            {m.name} ({m.role.toLowerCase()})
          </option>
        ))}
      </select>
      {error ? (
        <span role="alert" className="field-error">
          {describeError(error)}
        </span>
      ) : null}
    </div>
  );
}

/** The frame of every signed-in page: the main navigation, who is signed in, the page. */
export function Shell({ children }: { children: ReactNode }) {
  const me = useMe();
  const { logOut } = useSession();
  const [location] = useLocation();
  return (
    <div className="shell">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <header className="topbar">
        <Link href="/contacts" className="brand">
          svc
        </Link>
        <WorkspaceSwitcher />
        <div className="whoami">
          <span>
            {me.user.email || `User ${me.user.id}`} · <span className="role">{me.role.toLowerCase()}</span>
          </span>
          <button type="button" className="button-secondary" onClick={() => void logOut()}>
            Log out
          </button>
        </div>
      </header>
      <nav className="sidenav" aria-label="Main">
        <ul>
          {SECTIONS.map((s) => (
            <NavLink key={s.href} {...s} />
          ))}
          {me.superAdmin && <NavLink href="/admin" label="Admin" />}
        </ul>
      </nav>
      <main id="main" className="content" tabIndex={-1}>
        <ErrorBoundary resetKey={location}>{children}</ErrorBoundary>
      </main>
    </div>
  );
}
