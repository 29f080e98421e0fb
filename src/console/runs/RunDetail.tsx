import { useQuery } from '@tanstack/react-query';
import { Suspense, useMemo } from 'react';
import { GraphView } from '../automations/AutomationsPage';
import { Link } from 'wouter';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

const IN_FLIGHT = ['QUEUED', 'RUNNING', 'WAITING'];

/** One run: its steps with times and errors, the trigger body, and its deliveries. */
export function RunDetail({ runId }: { runId: number }) {
  const run = useQuery({
    queryKey: ['run', runId],
    queryFn: () => api('get', '/runs/{runId}', { params: { runId } }),
    refetchInterval: (q) => (q.state.data && IN_FLIGHT.includes(q.state.data.status) ? 2_000 : false),
  });
  const deliveries = useQuery({
    queryKey: ['deliveries', { runId }],
    queryFn: () => api('get', '/messages/delivery-attempts', { query: { runId, limit: 100 } }),
    refetchInterval: run.data && IN_FLIGHT.includes(run.data.status) ? 2_000 : false,
  });
  const r = run.data;
  const automation = useQuery({
    queryKey: ['automation', r?.automationId],
    queryFn: () => api('get', '/automations/{id}', { params: { id: r!.automationId! } }),
    enabled: Boolean(r?.automationId),
  });
  // The nodes the run went through: the trigger, and every step it reached.
  const taken = useMemo(() => {
    if (!r || !automation.data) return undefined;
    const trigger = automation.data.graph.nodes.find((n) => n.type === 'trigger');
    const ids = r.steps.filter((s) => s.nodeId && s.status !== 'PENDING' && s.status !== 'SKIPPED').map((s) => s.nodeId!);
    return new Set([...(trigger ? [trigger.id] : []), ...ids]);
  }, [r, automation.data]);
  return (
    <Page title={`Run ${runId}`}>
      <p>
        <Link href="/">← All runs</Link>
      </p>
      <ErrorAlert error={run.error} />
      {r && (
        <>
          <dl className="facts card">
            <dt>Status</dt>
            <dd>
              <StatusBadge status={r.status} />
            </dd>
            <dt>Started by</dt>
            <dd>
              {r.workflowId ? (
                <Link href={`~/app/workflows/${r.workflowId}`}>Workflow {r.workflowId}</Link>
              ) : r.automationId ? (
                <Link href={`~/app/automations/${r.automationId}`}>Automation {r.automationId}</Link>
              ) : (
                '—'
              )}
            </dd>
            <dt>Contact</dt>
            <dd>{r.contactId ? <Link href={`~/app/contacts/${r.contactId}`}>Contact {r.contactId}</Link> : '—'}</dd>
            <dt>Created</dt>
            <dd>{formatTime(r.createdAt)}</dd>
            <dt>Finished</dt>
            <dd>{formatTime(r.finishedAt)}</dd>
          </dl>
          <h2>Steps</h2>
          <table className="table">
            <caption className="visually-hidden">Steps</caption>
            <thead>
              <tr>
                <th scope="col">#</th>
                <th scope="col">Step</th>
                <th scope="col">Status</th>
                <th scope="col">Started</th>
                <th scope="col">Finished</th>
                <th scope="col">Error</th>
              </tr>
            </thead>
            <tbody>
              {r.steps.map((s) => (
                <tr key={s.index}>
                  <td>{s.index + 1}</td>
                  <td>{s.type.replace(/_/g, ' ')}</td>
                  <td>
                    <StatusBadge status={s.status} />
                  </td>
                  <td>{formatTime(s.startedAt)}</td>
                  <td>{formatTime(s.finishedAt)}</td>
                  <td>{s.error ?? '—'}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {automation.data && taken && (
            <>
              <h2>Path taken</h2>
              <Suspense fallback={<p className="loading">Loading the graph…</p>}>
                <GraphView graph={automation.data.graph} taken={taken} />
              </Suspense>
            </>
          )}
          <h2>Trigger body</h2>
          <pre className="json card">{JSON.stringify(r.trigger, null, 2)}</pre>
          <h2>Deliveries</h2>
          {(deliveries.data?.data ?? []).length === 0 ? (
            <p className="empty">No message was sent by this run.</p>
          ) : (
            <table className="table">
              <caption className="visually-hidden">Deliveries</caption>
              <thead>
                <tr>
                  <th scope="col">Channel</th>
                  <th scope="col">To</th>
                  <th scope="col">Status</th>
                  <th scope="col">Attempt</th>
                  <th scope="col">Content</th>
                </tr>
              </thead>
              <tbody>
                {deliveries.data!.data.map((d) => (
                  <tr key={d.id}>
                    <td>{d.channel.toLowerCase()}</td>
                    <td>{d.to}</td>
                    <td>
                      <StatusBadge status={d.status} /> {d.error ?? ''}
                    </td>
                    <td>{d.attempt}</td>
                    <td>
                      <code className="body-preview">
                        {String((d.rendered as Record<string, unknown>).subject ?? (d.rendered as Record<string, unknown>).text ?? '')}
                      </code>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </Page>
  );
}
