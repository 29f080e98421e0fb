import { Link, Route, Switch } from 'wouter';
import { api } from '../api/client';
import { useCan } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { NeedsRolePage } from '../ui/NeedsRole';
import { idOf, NotFoundPage } from '../ui/NotFound';
import { formatTime, Page } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';
import { TemplateEditor } from './TemplateEditor';

const PAGE = 50;

function TemplateList() {
  const canWrite = useCan('MEMBER');
  const { query: templates, rows } = usePagedList({
    queryKey: ['templates', 'list'],
    fetchPage: (cursor) => api('get', '/templates', { query: { limit: PAGE, cursor } }),
  });
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
        rows={rows ?? []}
        rowKey={(t) => t.id}
        empty="No templates yet."
        columns={[
          { header: 'Name', cell: (t) => <Link href={`/${t.id}`}>{t.name}</Link> },
          { header: 'Channel', cell: (t) => t.channel.toLowerCase() },
          { header: 'Updated', cell: (t) => formatTime(t.updatedAt) },
        ]}
      />
      <LoadMore query={templates} />
    </Page>
  );
}

export function TemplatesPage() {
  const canWrite = useCan('MEMBER');
  return (
    <Switch>
      <Route path="/" component={TemplateList} />
      {/* The editor at the same place as for /:id, so that it stays mounted (with its "Saved.") when a new template gets its address. */}
      <Route path="/new">
        {() =>
          canWrite ? (
            <TemplateEditor id={null} />
          ) : (
            <NeedsRolePage title="New template" needs="MEMBER" doing="Creating a template">
              <p>
                <Link href="/">← All templates</Link>
              </p>
            </NeedsRolePage>
          )
        }
      </Route>
      <Route path="/:id">
        {(p) => {
          const id = idOf(p.id);
          return id === null ? <NotFoundPage /> : <TemplateEditor id={id} />;
        }}
      </Route>
    </Switch>
  );
}
