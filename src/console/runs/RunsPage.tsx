import { useQuery } from '@tanstack/react-query';
import { useState } from 'react';
import { Link, Route, Switch } from 'wouter';
import { RunDetail } from './RunDetail';
import { api, ApiError } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
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
  const rows = runs.data?.data ?? [];
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
      {runs.isPending ? (
        <p className="loading">Loading runs…</p>
      ) : rows.length === 0 ? (
        !missing && <p className="empty">No runs.</p>
      ) : (
        <table className="table">
          <caption className="visually-hidden">Runs</caption>
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Status</th>
              <th scope="col">Workflow or automation</th>
              <th scope="col">Contact</th>
              <th scope="col">Started</th>
              <th scope="col">Finished</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((r) => (
              <tr key={r.runId}>
                <td>
                  <Link href={`/${r.runId}`}>Run {r.runId}</Link>
                </td>
                <td>
                  <StatusBadge status={r.status} />
                </td>
                <td>{r.workflowId ? `Workflow ${r.workflowId}` : r.automationId ? `Automation ${r.automationId}` : '—'}</td>
                <td>{r.contactId ?? '—'}</td>
                <td>{formatTime(r.createdAt)}</td>
                <td>{formatTime(r.finishedAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
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
