import { useQuery } from '@tanstack/react-query';
import { Link, Route, Switch } from 'wouter';
import { api } from '../api/client';
import { useCan } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { TemplateEditor } from './TemplateEditor';

function TemplateList() {
  const canWrite = useCan('MEMBER');
  const templates = useQuery({ queryKey: ['templates'], queryFn: () => api('get', '/templates', { query: { limit: 200 } }) });
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
      <DataTable
        caption="Templates"
        loading={templates.isPending && 'Loading templates…'}
        rows={templates.data?.data ?? []}
        rowKey={(t) => t.id}
        empty="No templates yet."
        columns={[
          { header: 'Name', cell: (t) => <Link href={`/${t.id}`}>{t.name}</Link> },
          { header: 'Channel', cell: (t) => t.channel.toLowerCase() },
          { header: 'Updated', cell: (t) => formatTime(t.updatedAt) },
        ]}
      />
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
