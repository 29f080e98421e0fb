import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { api, describeError } from '../api/client';
import { Alert, ErrorAlert } from '../ui/Alert';
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
  const rows = events.data?.data ?? [];
  return (
    <section className="card" aria-labelledby="events-heading">
      <h2 id="events-heading">Received events</h2>
      <ErrorAlert error={events.error} />
      {replayed && <Alert kind="success">{replayed}</Alert>}
      {replay.error ? <Alert>{describeError(replay.error)}</Alert> : null}
      {rows.length === 0 ? (
        <p className="empty">Nothing received yet.</p>
      ) : (
        <table className="table">
          <caption className="visually-hidden">Received events</caption>
          <thead>
            <tr>
              <th scope="col">Received</th>
              <th scope="col">Status</th>
              <th scope="col">Source</th>
              <th scope="col">Run</th>
              <th scope="col">Body</th>
              {canWrite && (
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              )}
            </tr>
          </thead>
          <tbody>
            {rows.map((e) => (
              <tr key={e.id}>
                <td>{formatTime(e.receivedAt)}</td>
                <td>
                  <span className={`badge badge-${e.statusCode < 300 ? 'ok' : 'bad'}`}>{e.statusCode}</span> {e.code ?? ''}
                </td>
                <td>{e.sourceIp ?? '—'}</td>
                <td>{e.runId ?? '—'}</td>
                <td>
                  <code className="body-preview">{(e.bodyText ?? JSON.stringify(e.body) ?? '').slice(0, 120)}</code>
                </td>
                {canWrite && (
                  <td>
                    {e.statusCode < 300 && (
                      <button type="button" className="button-secondary" aria-label={`Replay event ${e.id}`} onClick={() => replay.mutate(e.id)}>
                        Replay
                      </button>
                    )}
                  </td>
                )}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
