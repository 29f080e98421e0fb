import { useQuery } from '@tanstack/react-query';
import { Link } from 'wouter';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

/** One delivery attempt and the content it sent, as rendered. */
export function DeliveryDetail({ id }: { id: number }) {
  const delivery = useQuery({
    queryKey: ['delivery', id],
    queryFn: () => api('get', '/messages/delivery-attempts/{id}', { params: { id } }),
    refetchInterval: (q) => (q.state.data && ['QUEUED', 'SENDING'].includes(q.state.data.status) ? 2_000 : false),
  });
  const d = delivery.data;
  return (
    <Page title={`Delivery ${id}`}>
      <p>
        <Link href="/">← All deliveries</Link>
      </p>
      <ErrorAlert error={delivery.error} />
      {d && (
        <>
          <dl className="facts card">
            <dt>Status</dt>
            <dd>
              <StatusBadge status={d.status} /> {d.error ?? ''}
            </dd>
            <dt>Channel</dt>
            <dd>
              {d.channel.toLowerCase()} via {d.provider}
            </dd>
            <dt>To</dt>
            <dd>{d.to}</dd>
            <dt>Attempt</dt>
            <dd>{d.attempt}</dd>
            <dt>Run</dt>
            <dd>{d.runId ? <Link href={`~/app/runs/${d.runId}`}>Run {d.runId}</Link> : '—'}</dd>
            <dt>Provider id</dt>
            <dd>{d.providerMessageId ?? '—'}</dd>
            <dt>Created</dt>
            <dd>{formatTime(d.createdAt)}</dd>
          </dl>
          <section className="card rendered-card" aria-labelledby="content-heading">
            <h2 id="content-heading">Content</h2>
            <dl className="rendered">
              {Object.entries(d.rendered as Record<string, unknown>).map(([key, value]) => (
                <div key={key}>
                  <dt>{key}</dt>
                  <dd>
                    {key === 'html' ? (
                      <iframe title="HTML content" sandbox="" srcDoc={String(value)} />
                    ) : (
                      <pre>{typeof value === 'string' ? value : JSON.stringify(value, null, 2)}</pre>
                    )}
                  </dd>
                </div>
              ))}
            </dl>
          </section>
        </>
      )}
    </Page>
  );
}
