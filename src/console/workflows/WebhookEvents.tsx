import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { api, describeError } from '../api/client';
import { Alert, ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime } from '../ui/Page';

/** Every POST the webhook received, with a Replay for accepted ones. */
export function WebhookEvents({ workflowId, canWrite }: { workflowId: number; canWrite: boolean }) {
  const queries = useQueryClient();
  const events = useQuery({
    queryKey: ['webhook-events', workflowId],
    queryFn: () => api('get', '/workflows/{id}/webhook-events', { params: { id: workflowId }, query: { limit: 50 } }),
    refetchInterval: 10_000,
  });
  const [replayed, setReplayed] = useState<string | null>(null);
  const replay = useMutation({
    mutationFn: (eventId: number) => api('post', '/webhook-events/{id}/replay', { params: { id: eventId } }),
    onSuccess: (r) => {
      setReplayed(`Replayed: run ${r.runId} for contact ${r.contactId}.`);
      void queries.invalidateQueries({ queryKey: ['webhook-events', workflowId] });
    },
  });
  return (
    <section className="card" aria-labelledby="events-heading">
      <h2 id="events-heading">Received events</h2>
      <ErrorAlert error={events.error} />
      {replayed && <Alert kind="success">{replayed}</Alert>}
      {replay.error ? <Alert>{describeError(replay.error)}</Alert> : null}
      <DataTable
        caption="Received events"
        rows={events.data?.data ?? []}
        rowKey={(e) => e.id}
        empty="Nothing received yet."
        columns={[
          { header: 'Received', cell: (e) => formatTime(e.receivedAt) },
          {
            header: 'Status',
            cell: (e) => (
              <>
                <span className={`badge badge-${e.statusCode < 300 ? 'ok' : 'bad'}`}>{e.statusCode}</span> {e.code ?? ''}
              </>
            ),
          },
          { header: 'Source', cell: (e) => e.sourceIp ?? '—' },
          { header: 'Run', cell: (e) => e.runId ?? '—' },
          { header: 'Body', cell: (e) => <code className="body-preview">{(e.bodyText ?? JSON.stringify(e.body) ?? '').slice(0, 120)}</code> },
        ]}
        actions={
          canWrite &&
          ((e) =>
            e.statusCode < 300 && (
              <button type="button" className="button-secondary" aria-label={`Replay event ${e.id}`} onClick={() => replay.mutate(e.id)}>
                Replay
              </button>
            ))
        }
      />
    </section>
  );
}
