import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { Link } from 'wouter';
import { api, describeError, type BodyOf } from '../api/client';
import { useCan } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { CopyField } from '../ui/CopyField';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';
import { SigningExamples } from './SigningExamples';
import { SigningSecret } from './SigningSecret';
import { StepsEditor } from './StepsEditor';
import type { Workflow } from './types';
import { WebhookEvents } from './WebhookEvents';
import { WebhookSettings } from './WebhookSettings';
import { WebhookTest } from './WebhookTest';

/** A workflow: status, steps, its webhook (lookup, secret, URL, examples, test, received events). */
export function WorkflowDetail({ id }: { id: number }) {
  const canWrite = useCan('MEMBER');
  const queries = useQueryClient();
  const workflow = useQuery({ queryKey: ['workflow', id], queryFn: () => api('get', '/workflows/{id}', { params: { id } }) });
  const update = useMutation({
    mutationFn: (body: BodyOf<'/workflows/{id}', 'patch'>) => api('patch', '/workflows/{id}', { params: { id }, body }),
    onSuccess: (w) => {
      queries.setQueryData(['workflow', id], w);
      void queries.invalidateQueries({ queryKey: ['workflows'] });
    },
  });

  if (workflow.error) {
    return (
      <Page title="Workflow">
        <ErrorAlert error={workflow.error} />
        <Link href="/">Back to workflows</Link>
      </Page>
    );
  }
  const saved = (nw: Workflow) => {
    queries.setQueryData(['workflow', id], nw);
    void queries.invalidateQueries({ queryKey: ['workflows'] });
  };
  const w = workflow.data;
  if (!w) return <p className="loading">Loading the workflow…</p>;
  const active = w.status === 'ACTIVE';
  return (
    <Page
      title={w.name}
      actions={
        canWrite && (
          <button
            type="button"
            className={active ? 'button-secondary' : 'button-primary'}
            disabled={update.isPending}
            onClick={() => update.mutate({ status: active ? 'PAUSED' : 'ACTIVE' })}
          >
            {active ? 'Pause' : 'Activate'}
          </button>
        )
      }
    >
      <p>
        <Link href="/">← All workflows</Link>
      </p>
      <p className="meta">
        <StatusBadge status={w.status} /> Trigger: {w.triggerSource === 'MANUAL' ? 'manual (none yet: nothing starts its runs)' : w.triggerSource.toLowerCase()}{' '}
        · {w.steps.length} step{w.steps.length === 1 ? '' : 's'}
      </p>
      {update.error ? <Alert>{describeError(update.error)}</Alert> : null}
      {w.triggerSource === 'WEBHOOK' && <Endpoint workflow={w} canWrite={canWrite} />}
      <StepsEditor workflow={w} canWrite={canWrite} onSaved={saved} activationError={update.error} />
      {w.triggerSource === 'WEBHOOK' && <WebhookSettings workflow={w} canWrite={canWrite} onSaved={saved} activationError={update.error} />}
      {w.triggerSource === 'WEBHOOK' && canWrite && <SigningSecret workflow={w} onSaved={saved} />}
      {w.triggerSource === 'WEBHOOK' && canWrite && <WebhookTest workflowId={id} lookup={w.webhook.lookup} path={w.webhook.path} />}
      <RecentRuns workflowId={id} />
      {w.triggerSource === 'WEBHOOK' && <WebhookEvents workflowId={id} canWrite={canWrite} />}
    </Page>
  );
}

/** The URL to give the sender (after the first activation), and examples of signed requests. */
function Endpoint({ workflow: w, canWrite }: { workflow: Workflow; canWrite: boolean }) {
  const url = w.webhook.url;
  return (
    <section className="card" aria-labelledby="url-heading">
      <h2 id="url-heading">Endpoint</h2>
      {!url ? (
        <p className="hint">The webhook URL is made when the workflow is first activated{canWrite ? ': set a contact lookup, then Activate' : ''}.</p>
      ) : canWrite ? (
        <>
          <CopyField label="Webhook URL" value={url} />
          <p className="hint">
            {w.status !== 'ACTIVE' ? 'The workflow is not active: posts to this URL answer 404 until it is activated. ' : ''}
            {w.webhook.hasSigningSecret ? 'Requests must be signed with the signing secret.' : 'No signing secret is set: anyone with this URL can post to it.'}
          </p>
          <SigningExamples url={url} signed={w.webhook.hasSigningSecret} lookup={w.webhook.lookup} path={w.webhook.path} />
        </>
      ) : (
        <dl className="facts">
          <dt>Webhook URL</dt>
          <dd>
            <code>{url}</code> <span className="hint">(shown whole to members)</span>
          </dd>
        </dl>
      )}
    </section>
  );
}

/** The workflow's latest runs, each linked to its page (steps, trigger body, deliveries). */
function RecentRuns({ workflowId }: { workflowId: number }) {
  const runs = useQuery({
    queryKey: ['workflow-runs', workflowId],
    queryFn: () => api('get', '/workflows/{id}/runs', { params: { id: workflowId }, query: { limit: 10 } }),
    // Soon while a run is queued or running; a waiting run (up to 30 days) is not watched so.
    refetchInterval: (q) => (q.state.data?.data.some((r) => r.status === 'QUEUED' || r.status === 'RUNNING') ? 2_000 : 10_000),
  });
  return (
    <section className="card" aria-labelledby="runs-heading">
      <h2 id="runs-heading">Recent runs</h2>
      <ErrorAlert error={runs.error} />
      <DataTable
        caption="Recent runs"
        rows={runs.data?.data ?? []}
        rowKey={(r) => r.runId}
        empty="No runs yet."
        columns={[
          { header: 'Run', cell: (r) => <Link href={`~/app/runs/${r.runId}`}>Run {r.runId}</Link> },
          { header: 'Status', cell: (r) => <StatusBadge status={r.status} /> },
          { header: 'Contact', cell: (r) => (r.contactId ? <Link href={`~/app/contacts/${r.contactId}`}>Contact {r.contactId}</Link> : '—') },
          { header: 'Started', cell: (r) => formatTime(r.createdAt) },
        ]}
      />
    </section>
  );
}
