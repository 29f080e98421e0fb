import { useQuery } from '@tanstack/react-query';
import { Suspense, useMemo } from 'react';
import { GraphView } from '../automations/AutomationsPage';
import { Link } from 'wouter';
import { api } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

const IN_FLIGHT = ['QUEUED', 'RUNNING', 'WAITING'];
/** Soon while the run is queued or running; now and then while it waits (up to 30 days); not once it has ended. */
const pollEvery = (status: string | undefined): number | false =>
  status === 'QUEUED' || status === 'RUNNING' ? 2_000 : status && IN_FLIGHT.includes(status) ? 30_000 : false;

/** A sent message's subject, or its text when it has none. */
const renderedPreview = (rendered: unknown): string => {
  const r = rendered as Record<string, unknown>;
  return String(r.subject ?? r.text ?? '');
};

/** One run: its steps with times and errors, the trigger body, and its deliveries. */
export function RunDetail({ runId }: { runId: number }) {
  const run = useQuery({
    queryKey: ['run', runId],
    queryFn: () => api('get', '/runs/{runId}', { params: { runId } }),
    refetchInterval: (q) => pollEvery(q.state.data?.status),
  });
  const deliveries = useQuery({
    queryKey: ['deliveries', { runId }],
    queryFn: () => api('get', '/messages/delivery-attempts', { query: { runId, limit: 100 } }),
    refetchInterval: pollEvery(run.data?.status),
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
          <DataTable
            caption="Steps"
            rows={r.steps}
            rowKey={(s) => s.index}
            columns={[
              { header: '#', cell: (s) => s.index + 1 },
              { header: 'Step', cell: (s) => s.type.replace(/_/g, ' ') },
              { header: 'Status', cell: (s) => <StatusBadge status={s.status} /> },
              { header: 'Started', cell: (s) => formatTime(s.startedAt) },
              { header: 'Finished', cell: (s) => formatTime(s.finishedAt) },
              { header: 'Error', cell: (s) => s.error ?? '—' },
            ]}
          />
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
          <DataTable
            caption="Deliveries"
            rows={deliveries.data?.data ?? []}
            rowKey={(d) => d.id}
            empty="No message was sent by this run."
            columns={[
              { header: 'Channel', cell: (d) => d.channel.toLowerCase() },
              { header: 'To', cell: (d) => d.to },
              {
                header: 'Status',
                cell: (d) => (
                  <>
                    <StatusBadge status={d.status} /> {d.error ?? ''}
                  </>
                ),
              },
              { header: 'Attempt', cell: (d) => d.attempt },
              { header: 'Content', cell: (d) => <code className="body-preview">{renderedPreview(d.rendered)}</code> },
            ]}
          />
        </>
      )}
    </Page>
  );
}
