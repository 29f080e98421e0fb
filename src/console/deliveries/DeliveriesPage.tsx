import { useQuery } from '@tanstack/react-query';
import { Link, Route, Switch } from 'wouter';
import { DeliveryDetail } from './DeliveryDetail';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

function DeliveryList() {
  const deliveries = useQuery({
    queryKey: ['deliveries'],
    queryFn: () => api('get', '/messages/delivery-attempts', { query: { limit: 100 } }),
    refetchInterval: 10_000,
  });
  const rows = deliveries.data?.data ?? [];
  return (
    <Page title="Deliveries">
      <ErrorAlert error={deliveries.error} />
      {deliveries.isPending ? (
        <p className="loading">Loading deliveries…</p>
      ) : rows.length === 0 ? (
        <p className="empty">No messages sent yet.</p>
      ) : (
        <table className="table">
          <caption className="visually-hidden">Deliveries</caption>
          <thead>
            <tr>
              <th scope="col">Channel</th>
              <th scope="col">To</th>
              <th scope="col">Status</th>
              <th scope="col">Provider</th>
              <th scope="col">Run</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((d) => (
              <tr key={d.id}>
                <td>
                  <Link href={`/${d.id}`}>{d.channel.toLowerCase()}</Link>
                </td>
                <td>{d.to}</td>
                <td>
                  <StatusBadge status={d.status} />
                  {d.error ? <span className="meta"> {d.error}</span> : null}
                </td>
                <td>{d.provider}</td>
                <td>{d.runId ?? '—'}</td>
                <td>{formatTime(d.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
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
