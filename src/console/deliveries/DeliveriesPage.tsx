import { Link, Route, Switch } from 'wouter';
import { DeliveryDetail } from './DeliveryDetail';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { idOf, NotFoundPage } from '../ui/NotFound';
import { formatTime, Page } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';
import { StatusBadge } from '../ui/StatusBadge';

const PAGE = 50;

function DeliveryList() {
  const { query: deliveries, rows } = usePagedList({
    queryKey: ['deliveries', 'list'],
    fetchPage: (cursor) => api('get', '/messages/delivery-attempts', { query: { limit: PAGE, cursor } }),
    refetchInterval: 10_000,
  });
  return (
    <Page title="Deliveries">
      <ErrorAlert error={deliveries.error} />
      <DataTable
        caption="Deliveries"
        loading={deliveries.isPending && 'Loading deliveries…'}
        rows={rows ?? []}
        rowKey={(d) => d.id}
        empty="No messages sent yet."
        columns={[
          { header: 'Channel', cell: (d) => <Link href={`/${d.id}`}>{d.channel.toLowerCase()}</Link> },
          { header: 'To', cell: (d) => d.to },
          {
            header: 'Status',
            cell: (d) => (
              <>
                <StatusBadge status={d.status} />
                {d.error ? <span className="meta"> {d.error}</span> : null}
              </>
            ),
          },
          { header: 'Provider', cell: (d) => d.provider },
          { header: 'Run', cell: (d) => d.runId ?? '—' },
          { header: 'Created', cell: (d) => formatTime(d.createdAt) },
        ]}
      />
      <LoadMore query={deliveries} />
    </Page>
  );
}

export function DeliveriesPage() {
  return (
    <Switch>
      <Route path="/" component={DeliveryList} />
      <Route path="/:id">
        {(p) => {
          const id = idOf(p.id);
          return id === null ? <NotFoundPage /> : <DeliveryDetail id={id} />;
        }}
      </Route>
    </Switch>
  );
}
