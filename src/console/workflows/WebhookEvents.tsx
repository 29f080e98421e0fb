import { useMutation, useQueryClient } from '@tanstack/react-query';
import { useState } from 'react';
import { api, describeError, type ResultOf } from '../api/client';
import { Alert, ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';

type WebhookEvent = ResultOf<'/workflows/{id}/webhook-events', 'get'>['data'][number];

const PAGE = 50;

/**
 * Whether the API may replay the event: it replays any whose body was read and whose
 * signature held, accepted or refused for its lookup or contact (fixed since in the
 * workflow's settings); it refuses (422 event_not_replayable) those refused for their
 * signature, or before their body was read (no body kept; or only its first bytes and a
 * digest, kept for a request refused before its signature was verified).
 */
function replayable(e: WebhookEvent): boolean {
  return e.bodySize !== null && e.bodySha256 === null && e.code !== 'signature_invalid';
}

/** Every POST the webhook received, with a Replay for those the API would replay. */
export function WebhookEvents({ workflowId, canWrite }: { workflowId: number; canWrite: boolean }) {
  const queries = useQueryClient();
  const { query: events, rows } = usePagedList({
    queryKey: ['webhook-events', workflowId],
    fetchPage: (cursor) => api('get', '/workflows/{id}/webhook-events', { params: { id: workflowId }, query: { limit: PAGE, cursor } }),
    refetchInterval: 10_000,
  });
  const [replayed, setReplayed] = useState<string | null>(null);
  const replay = useMutation({
    mutationFn: (eventId: number) => api('post', '/webhook-events/{id}/replay', { params: { id: eventId } }),
    onMutate: () => setReplayed(null),
    onSuccess: (r) => {
      setReplayed(`Replayed: run ${r.runId} for contact ${r.contactId}.`);
      void queries.invalidateQueries({ queryKey: ['webhook-events', workflowId] });
      // The new run is one of the workflow's recent runs.
      void queries.invalidateQueries({ queryKey: ['workflow-runs', workflowId] });
    },
  });
  return (
    <section className="card" aria-labelledby="events-heading">
      <h2 id="events-heading">Received events</h2>
      <ErrorAlert error={events.error} />
      {replayed && <Alert kind="success">{replayed}</Alert>}
      {replay.error ? (
        <Alert>
          Event {replay.variables} was not replayed: {describeError(replay.error)}
        </Alert>
      ) : null}
      <DataTable
        caption="Received events"
        rows={rows ?? []}
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
            replayable(e) && (
              <button
                type="button"
                className="button-secondary"
                aria-label={`Replay event ${e.id}`}
                disabled={replay.isPending}
                onClick={() => replay.mutate(e.id)}
              >
                Replay
              </button>
            ))
        }
      />
      <LoadMore query={events} label="Load more events" />
    </section>
  );
}
