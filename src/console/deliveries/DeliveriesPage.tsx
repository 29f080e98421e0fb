import { useQuery } from '@tanstack/react-query';
import { Link, Route, Switch } from 'wouter';
import { DeliveryDetail } from './DeliveryDetail';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

function DeliveryList() {
  const deliveries = useQuery({
    queryKey: ['deliveries'],
    queryFn: () => api('get', '/messages/delivery-attempts', { query: { limit: 100 } }),
    refetchInterval: 10_000,
  });
  return (
    <Page title="Deliveries">
      <ErrorAlert error={deliveries.error} />
      <DataTable
        caption="Deliveries"
        loading={deliveries.isPending && 'Loading deliveries…'}
        rows={deliveries.data?.data ?? []}
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
    </Page>
  );
}

export function DeliveriesPage() {
  return (
    <Switch>
      <Route path="/" component={DeliveryList} />
      <Route path="/:id">{(p) => <DeliveryDetail id={Number(p.id)} />}</Route>
    </Switch>
  );
}
