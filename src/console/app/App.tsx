import { Redirect, Route, Switch, useLocation } from 'wouter';
import { LoginPage } from '../auth/LoginPage';
import { AdminPage } from '../admin/AdminPage';
import { AutomationsPage } from '../automations/AutomationsPage';
import { ContactFormPage } from '../contacts/ContactFormPage';
import { ContactsImportPage } from '../contacts/ContactsImportPage';
import { ContactsPage } from '../contacts/ContactsPage';
import { DeliveriesPage } from '../deliveries/DeliveriesPage';
import { InvitePage } from '../invite/InvitePage';
import { RunsPage } from '../runs/RunsPage';
import { SettingsPage } from '../settings/SettingsPage';
import { TemplatesPage } from '../templates/TemplatesPage';
import { WorkflowsPage } from '../workflows/WorkflowsPage';
import { Page } from '../ui/Page';
import { useSession } from './session';
import { Shell } from './Shell';

function SignedInRoutes() {
  return (
    <Shell>
      <Switch>
        <Route path="/">
          <Redirect to="/contacts" replace />
        </Route>
        <Route path="/contacts" component={ContactsPage} />
        <Route path="/contacts/new">{() => <ContactFormPage id={null} />}</Route>
        <Route path="/contacts/import" component={ContactsImportPage} />
        <Route path="/contacts/:id">{(params) => <ContactFormPage id={Number(params.id)} />}</Route>
        <Route path="/templates" nest component={TemplatesPage} />
        <Route path="/automations" nest component={AutomationsPage} />
        <Route path="/workflows" nest component={WorkflowsPage} />
        <Route path="/runs" nest component={RunsPage} />
        <Route path="/deliveries" nest component={DeliveriesPage} />
        <Route path="/settings" nest component={SettingsPage} />
        <Route path="/admin" component={AdminPage} />
        <Route>
          <Page title="Page not found">
            <p>There is no page at this address.</p>
          </Page>
        </Route>
      </Switch>
    </Shell>
  );
}

function Console() {
  const { state } = useSession();
  if (state.status === 'loading') {
    return (
      <main className="centered" id="main" aria-busy="true">
        <p className="loading">Loading…</p>
      </main>
    );
  }
  if (state.status === 'anonymous') return <LoginPage reason={state.reason} />;
  return <SignedInRoutes />;
}

export function App() {
  const [, navigate] = useLocation();
  return (
    <Switch>
      <Route path="/invite">
        <InvitePage onAccepted={() => navigate('/app/contacts')} />
      </Route>
      <Route path="/app" nest>
        <Console />
      </Route>
      <Route>
        <Redirect to="/app/" replace />
      </Route>
    </Switch>
  );
}
