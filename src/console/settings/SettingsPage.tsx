import { Link, Redirect, Route, Switch, useLocation } from 'wouter';
import { useCan } from '../app/session';
import { Page } from '../ui/Page';
import { ApiKeysSection } from './ApiKeysSection';
import { AuditLogSection } from './AuditLogSection';
import { BillingSection } from './BillingSection';
import { ChannelsSection } from './ChannelsSection';
import { MembersSection } from './MembersSection';

/**
 * Settings, nested under /settings. Every role reads Members and Billing; API keys, Channels
 * and the Audit log are the workspace settings of ADMIN and above (API.md's role matrix).
 */
export function SettingsPage() {
  const isAdmin = useCan('ADMIN');
  const [location] = useLocation();
  const tabs = [
    ...(isAdmin ? [{ href: '/api-keys', label: 'API keys' }] : []),
    { href: '/members', label: 'Members' },
    ...(isAdmin ? [{ href: '/channels', label: 'Channels' }] : []),
    { href: '/billing', label: 'Billing' },
    ...(isAdmin ? [{ href: '/audit-log', label: 'Audit log' }] : []),
  ];
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
        {isAdmin && <Route path="/channels" component={ChannelsSection} />}
        <Route path="/billing" component={BillingSection} />
        {isAdmin && <Route path="/audit-log" component={AuditLogSection} />}
        <Route>
          <p>This part of the settings is not available to your role.</p>
        </Route>
      </Switch>
    </Page>
  );
}
