import { useQuery } from '@tanstack/react-query';
import { Link, Route, Switch } from 'wouter';
import { api } from '../api/client';
import { useCan } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { formatTime, Page } from '../ui/Page';
import { TemplateEditor } from './TemplateEditor';

function TemplateList() {
  const canWrite = useCan('MEMBER');
  const templates = useQuery({ queryKey: ['templates'], queryFn: () => api('get', '/templates', { query: { limit: 200 } }) });
  const rows = templates.data?.data ?? [];
  return (
    <Page
      title="Templates"
      actions={
        canWrite && (
          <Link href="/new" className="button button-primary">
            New template
          </Link>
        )
      }
    >
      <ErrorAlert error={templates.error} />
      {templates.isPending ? (
        <p className="loading">Loading templates…</p>
      ) : rows.length === 0 ? (
        <p className="empty">No templates yet.</p>
      ) : (
        <table className="table">
          <caption className="visually-hidden">Templates</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Channel</th>
              <th scope="col">Updated</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((t) => (
              <tr key={t.id}>
                <td>
                  <Link href={`/${t.id}`}>{t.name}</Link>
                </td>
                <td>{t.channel.toLowerCase()}</td>
                <td>{formatTime(t.updatedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Page>
  );
}

export function TemplatesPage() {
  return (
    <Switch>
      <Route path="/" component={TemplateList} />
      <Route path="/new">{() => <TemplateEditor id={null} />}</Route>
      <Route path="/:id">{(p) => <TemplateEditor id={Number(p.id)} />}</Route>
    </Switch>
  );
}
