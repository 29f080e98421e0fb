import { Link, Redirect, Route, Switch, useLocation } from 'wouter';
import { useCan } from '../app/session';
import { Page } from '../ui/Page';
import { ApiKeysSection } from './ApiKeysSection';
import { MembersSection } from './MembersSection';

/** Settings, nested under /settings: API keys (ADMIN and above) and Members. */
export function SettingsPage() {
  const isAdmin = useCan('ADMIN');
  const [location] = useLocation();
  const tabs = [...(isAdmin ? [{ href: '/api-keys', label: 'API keys' }] : []), { href: '/members', label: 'Members' }];
  return (
    <Page title="Settings">
      <nav aria-label="Settings" className="tabs">
        <ul>
          {tabs.map((t) => (
            <li key={t.href}>
              <Link href={t.href} className={location === t.href ? 'active' : undefined} aria-current={location === t.href ? 'page' : undefined}>
                {t.label}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <Switch>
        <Route path="/">
          <Redirect to={isAdmin ? '/api-keys' : '/members'} replace />
        </Route>
        {isAdmin && <Route path="/api-keys" component={ApiKeysSection} />}
        <Route path="/members" component={MembersSection} />
        <Route>
          <p>This part of the settings is not available to your role.</p>
        </Route>
      </Switch>
    </Page>
  );
}
