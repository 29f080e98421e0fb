import { useInfiniteQuery } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { api, ApiError, type QueryOf } from '../api/client';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime } from '../ui/Page';

type ActorType = NonNullable<QueryOf<'/audit-logs', 'get'>['actorType']>;

const PAGE = 50;
const ACTORS: { value: ActorType | ''; label: string }[] = [
  { value: '', label: 'Anyone' },
  { value: 'USER', label: 'People' },
  { value: 'API_KEY', label: 'API keys' },
  { value: 'CLI', label: 'Command line' },
  { value: 'SYSTEM', label: 'System' },
];
const ACTOR_NAME: Record<ActorType, string> = { USER: 'Person', API_KEY: 'API key', CLI: 'Command line', SYSTEM: 'System' };
const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;

/** The day after a YYYY-MM-DD date, since the API's `until` is exclusive and the form's "To" day is included. */
function dayAfter(date: string): string {
  const d = new Date(`${date}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + 1);
  return d.toISOString().slice(0, 10);
}

function withParam(params: URLSearchParams, name: string, value: string): URLSearchParams {
  if (value) params.set(name, value);
  else params.delete(name);
  return params;
}

/**
 * The audit log (ADMIN and above, Growth and Pro): filters in the address, cursor pages on
 * demand. On Starter the API answers 403 plan_upgrade_required, shown as an upgrade message.
 */
export function AuditLogSection() {
  const [params, setParams] = useSearchParams();
  const action = params.get('action') ?? '';
  const actor = (params.get('actor') ?? '') as ActorType | '';
  const from = params.get('from') ?? '';
  const to = params.get('to') ?? '';
  const [actionText, setActionText] = useState(action);
  useEffect(() => setActionText(action), [action]);
  // The action filter is applied a moment after typing stops.
  useEffect(() => {
    if (actionText.trim() === action) return;
    const timer = setTimeout(() => setParams((p) => withParam(p, 'action', actionText.trim()), { replace: true }), 300);
    return () => clearTimeout(timer);
  }, [actionText, action, setParams]);

  const logs = useInfiniteQuery({
    queryKey: ['audit-logs', { action, actor, from, to }],
    queryFn: ({ pageParam }) =>
      api('get', '/audit-logs', {
        query: {
          limit: PAGE,
          cursor: pageParam,
          action: action || undefined,
          actorType: actor || undefined,
          since: DATE_RE.test(from) ? from : undefined,
          until: DATE_RE.test(to) ? dayAfter(to) : undefined,
        },
      }),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.nextCursor ?? undefined,
  });
  const rows = logs.data?.pages.flatMap((p) => p.data) ?? [];
  const needsUpgrade = logs.error instanceof ApiError && logs.error.code === 'plan_upgrade_required';
  const filtered = !!(action || actor || from || to);

  if (needsUpgrade) {
    return (
      <section aria-labelledby="audit-heading">
        <h2 id="audit-heading">Audit log</h2>
        <div className="card upgrade">
          <p>
            The audit log records every change in this workspace: who did it, when and from where. It is part of the Growth and Pro plans; this workspace is on
            Starter.
          </p>
          <p>
            <Link href="/billing" className="button button-primary">
              See plans and upgrade
            </Link>
          </p>
        </div>
      </section>
    );
  }

  return (
    <section aria-labelledby="audit-heading">
      <h2 id="audit-heading">Audit log</h2>
      <form className="toolbar" aria-label="Filter the audit log" onSubmit={(e) => e.preventDefault()}>
        <div className="field">
          <label htmlFor="audit-action">Action</label>
          <input
            id="audit-action"
            type="search"
            value={actionText}
            placeholder="contact.created or contact.*"
            aria-describedby="audit-action-hint"
            onChange={(e) => setActionText(e.target.value)}
          />
          <p className="visually-hidden" id="audit-action-hint">
            An exact action, or a group ending in .* such as contact.*
          </p>
        </div>
        <div className="field">
          <label htmlFor="audit-actor">Actor</label>
          <select id="audit-actor" value={actor} onChange={(e) => setParams((p) => withParam(p, 'actor', e.target.value))}>
            {ACTORS.map((a) => (
              <option key={a.value} value={a.value}>
                {a.label}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="audit-from">From (UTC)</label>
          <input id="audit-from" type="date" value={from} max={to || undefined} onChange={(e) => setParams((p) => withParam(p, 'from', e.target.value))} />
        </div>
        <div className="field">
          <label htmlFor="audit-to">To (UTC)</label>
          <input id="audit-to" type="date" value={to} min={from || undefined} onChange={(e) => setParams((p) => withParam(p, 'to', e.target.value))} />
        </div>
        {filtered && (
          <button type="button" className="button-secondary" onClick={() => setParams(new URLSearchParams())}>
            Clear filters
          </button>
        )}
      </form>
      <ErrorAlert error={logs.error} />
      <DataTable
        caption="Audit log"
        className="audit"
        loading={logs.isPending && 'Loading the audit log…'}
        rows={logs.error ? undefined : rows}
        rowKey={(r) => r.id}
        empty={filtered ? 'No entry matches.' : 'Nothing recorded yet.'}
        columns={[
          { header: 'Time', cell: (r) => <time dateTime={r.at}>{formatTime(r.at)}</time> },
          {
            header: 'Actor',
            cell: (r) => (
              <>
                {r.actor.label ?? '—'}
                <span className="meta"> {ACTOR_NAME[r.actor.type]}</span>
              </>
            ),
          },
          { header: 'Action', cell: (r) => <code>{r.action}</code> },
          { header: 'Target', cell: (r) => (r.target ? `${r.target.type}${r.target.id !== null ? ` ${r.target.id}` : ''}` : '—') },
          { header: 'IP address', cell: (r) => r.ip ?? '—' },
          {
            header: 'Details',
            cell: (r) => (Object.keys(r.metadata).length ? <code className="audit-details">{JSON.stringify(r.metadata)}</code> : '—'),
          },
        ]}
      />
      {logs.hasNextPage && !logs.error && (
        <p>
          <button type="button" className="button-secondary" onClick={() => void logs.fetchNextPage()} disabled={logs.isFetchingNextPage}>
            {logs.isFetchingNextPage ? 'Loading…' : 'Load more'}
          </button>
        </p>
      )}
      {rows.length > 0 && (
        <p className="meta">
          {rows.length} entr{rows.length === 1 ? 'y' : 'ies'} shown, newest first{logs.hasNextPage ? '; older ones follow' : ''}.
        </p>
      )}
    </section>
  );
}
