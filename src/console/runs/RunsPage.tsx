import { Link, Route, Switch, useSearchParams } from 'wouter';
import { RunDetail } from './RunDetail';
import { api, ApiError } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { idOf, NotFoundPage } from '../ui/NotFound';
import { formatTime, Page } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';
import { StatusBadge } from '../ui/StatusBadge';

const STATUSES = ['', 'QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED'] as const;
type Status = (typeof STATUSES)[number];
const PAGE = 50;

/**
 * How often the list is fetched again: soon while a run shown is queued or running (they
 * change within seconds); else now and then, for new runs and for runs that wait (a wait
 * lasts up to 30 days: polling every few seconds for it would be waste).
 */
function runsPollInterval(rows: { status: string }[]): number {
  return rows.some((r) => r.status === 'QUEUED' || r.status === 'RUNNING') ? 3_000 : 30_000;
}

function RunList() {
  // The filter is in the address (?status=), so a reload or a shared link keeps it.
  const [params, setParams] = useSearchParams();
  const asked = params.get('status') ?? '';
  const status: Status = (STATUSES as readonly string[]).includes(asked) ? (asked as Status) : '';
  const setStatus = (next: Status) =>
    setParams((p) => {
      if (next) p.set('status', next);
      else p.delete('status');
      return p;
    });
  const { query: runs, rows } = usePagedList({
    queryKey: ['runs', 'list', status],
    fetchPage: (cursor) => api('get', '/runs', { query: { limit: PAGE, status: status || undefined, cursor } }),
    // Runs in flight change by themselves.
    refetchInterval: runsPollInterval,
    retry: false,
  });
  const missing = runs.error instanceof ApiError && runs.error.status === 404;
  return (
    <Page title="Runs">
      <form className="toolbar" aria-label="Filter runs" onSubmit={(e) => e.preventDefault()}>
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
        rows={missing ? undefined : (rows ?? [])}
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
      {!missing && <LoadMore query={runs} />}
    </Page>
  );
}

export function RunsPage() {
  return (
    <Switch>
      <Route path="/" component={RunList} />
      <Route path="/:runId">
        {(p) => {
          const runId = idOf(p.runId);
          return runId === null ? <NotFoundPage /> : <RunDetail runId={runId} />;
        }}
      </Route>
    </Switch>
  );
}
