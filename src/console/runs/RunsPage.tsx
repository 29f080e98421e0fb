import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { Link, Route, Switch } from 'wouter';
import { RunDetail } from './RunDetail';
import { api, ApiError } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

const STATUSES = ['', 'QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED'] as const;
type Status = (typeof STATUSES)[number];

function RunList() {
  const [status, setStatus] = useState<Status>('');
  const runs = useQuery({
    queryKey: ['runs', status],
    queryFn: () => api('get', '/runs', { query: { limit: 100, status: status || undefined } }),
    // Runs in flight change by themselves.
    refetchInterval: (q) => (q.state.data?.data.some((r) => ['QUEUED', 'RUNNING', 'WAITING'].includes(r.status)) ? 3_000 : 15_000),
    retry: false,
  });
  const missing = runs.error instanceof ApiError && runs.error.status === 404;
  return (
    <Page title="Runs">
      <form className="toolbar" onSubmit={(e) => e.preventDefault()}>
        <div className="field">
          <label htmlFor="run-status">Status</label>
          <select id="run-status" value={status} onChange={(e) => setStatus(e.target.value as Status)}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s ? s.toLowerCase() : 'Any status'}
              </option>
            ))}
          </select>
        </div>
      </form>
      {missing ? <p className="empty">This server cannot list runs yet; see each workflow's runs with the API.</p> : <ErrorAlert error={runs.error} />}
      <DataTable
        caption="Runs"
        loading={runs.isPending && 'Loading runs…'}
        rows={missing ? undefined : (runs.data?.data ?? [])}
        rowKey={(r) => r.runId}
        empty="No runs."
        columns={[
          { header: 'Run', cell: (r) => <Link href={`/${r.runId}`}>Run {r.runId}</Link> },
          { header: 'Status', cell: (r) => <StatusBadge status={r.status} /> },
          {
            header: 'Workflow or automation',
            cell: (r) => (r.workflowId ? `Workflow ${r.workflowId}` : r.automationId ? `Automation ${r.automationId}` : '—'),
          },
          { header: 'Contact', cell: (r) => r.contactId ?? '—' },
          { header: 'Started', cell: (r) => formatTime(r.createdAt) },
          { header: 'Finished', cell: (r) => formatTime(r.finishedAt) },
        ]}
      />
    </Page>
  );
}

export function RunsPage() {
  return (
    <Switch>
      <Route path="/" component={RunList} />
      <Route path="/:runId">{(p) => <RunDetail runId={Number(p.runId)} />}</Route>
    </Switch>
  );
}
