import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { lazy, Suspense, useState, type FormEvent } from 'react';
import { Link, Route, Switch, useLocation } from 'wouter';
import type { InfiniteData } from '@tanstack/react-query';
import { api, describeError, fieldError, type ResultOf } from '../api/client';
import { useCan } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { ContactPicker } from '../ui/ContactPicker';
import { Field } from '../ui/Field';
import { idOf, NotFoundPage } from '../ui/NotFound';
import { formatTime, Page } from '../ui/Page';
import { LoadMore, usePagedList } from '../ui/paging';
import { StatusBadge } from '../ui/StatusBadge';
import { initialGraph } from './catalog';

// React Flow is loaded only when a graph is shown: the viewer, and the editor in the same chunk.
export const GraphView = lazy(() => import('./GraphView'));
const GraphEditor = lazy(() => import('./GraphView').then((m) => ({ default: m.GraphEditor })));

/** Creates an automation with its trigger, then opens it in the editor. */
function NewAutomation({ onCancel }: { onCancel: () => void }) {
  const [, navigate] = useLocation();
  const queries = useQueryClient();
  const [name, setName] = useState('');
  const [blank, setBlank] = useState(false);
  const create = useMutation({
    mutationFn: () => api('post', '/automations', { body: { name, graph: initialGraph() } }),
    onSuccess: (a) => {
      queries.setQueryData(['automation', a.id], a);
      void queries.invalidateQueries({ queryKey: ['automations'] });
      navigate(`/${a.id}`);
    },
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setBlank(!name.trim());
    if (name.trim()) create.mutate();
  };
  const nameError = blank ? 'Give the automation a name' : fieldError(create.error, '/name');
  return (
    <form className="card inline-form" onSubmit={submit} noValidate aria-label="New automation">
      <Field label="Name" value={name} onChange={(e) => setName(e.target.value)} error={nameError} required maxLength={200} autoFocus />
      <button type="submit" className="button-primary" disabled={create.isPending}>
        Create
      </button>
      <button type="button" className="button-secondary inline-cancel" onClick={onCancel}>
        Cancel
      </button>
      {create.error && !nameError ? <Alert>{describeError(create.error)}</Alert> : null}
    </form>
  );
}

const PAGE = 50;
const LIST_KEY = ['automations', 'list'];

function AutomationList() {
  const canWrite = useCan('MEMBER');
  const [creating, setCreating] = useState(false);
  const { query: automations, rows } = usePagedList({
    queryKey: LIST_KEY,
    fetchPage: (cursor) => api('get', '/automations', { query: { limit: PAGE, cursor } }),
  });
  return (
    <Page
      title="Automations"
      actions={
        canWrite &&
        !creating && (
          <button type="button" className="button-primary" onClick={() => setCreating(true)}>
            New automation
          </button>
        )
      }
    >
      {creating && <NewAutomation onCancel={() => setCreating(false)} />}
      <ErrorAlert error={automations.error} />
      <DataTable
        caption="Automations"
        loading={automations.isPending && 'Loading automations…'}
        rows={rows ?? []}
        rowKey={(a) => a.id}
        empty="No automations yet."
        columns={[
          { header: 'Name', cell: (a) => <Link href={`/${a.id}`}>{a.name}</Link> },
          { header: 'Status', cell: (a) => <StatusBadge status={a.status} /> },
          { header: 'Nodes', cell: (a) => a.graph.nodes.length },
          { header: 'Updated', cell: (a) => formatTime(a.updatedAt) },
        ]}
      />
      <LoadMore query={automations} />
    </Page>
  );
}

function AutomationDetail({ id }: { id: number }) {
  const canWrite = useCan('MEMBER');
  const queries = useQueryClient();
  const automation = useQuery({
    queryKey: ['automation', id],
    queryFn: () => api('get', '/automations/{id}', { params: { id } }),
    // The list's row names the page at once; the graph waits for the automation itself.
    placeholderData: () =>
      queries
        .getQueryData<InfiniteData<ResultOf<'/automations', 'get'>>>(LIST_KEY)
        ?.pages.flatMap((p) => p.data)
        .find((a) => a.id === id),
  });
  const status = useMutation({
    mutationFn: (next: 'ACTIVE' | 'PAUSED') => api('patch', '/automations/{id}', { params: { id }, body: { status: next } }),
    onSuccess: (a) => {
      queries.setQueryData(['automation', id], a);
      void queries.invalidateQueries({ queryKey: ['automations'] });
    },
  });
  const a = automation.data;
  const active = a?.status === 'ACTIVE';
  return (
    <Page
      title={a?.name ?? 'Automation'}
      actions={
        canWrite &&
        a && (
          <button
            type="button"
            className={active ? 'button-secondary' : 'button-primary'}
            disabled={status.isPending}
            onClick={() => status.mutate(active ? 'PAUSED' : 'ACTIVE')}
          >
            {active ? 'Pause' : 'Activate'}
          </button>
        )
      }
    >
      <p>
        <Link href="/">← All automations</Link>
      </p>
      {a && (
        <p className="meta">
          <StatusBadge status={a.status} />
        </p>
      )}
      {status.error ? <Alert>{describeError(status.error)}</Alert> : null}
      <ErrorAlert error={automation.error} />
      {canWrite && a && <RunOnContact automationId={id} active={active} />}
      {automation.isPlaceholderData && <p className="loading">Loading the graph…</p>}
      {a && !automation.isPlaceholderData && (
        <Suspense fallback={<p className="loading">Loading the graph…</p>}>
          {canWrite ? (
            <GraphEditor
              key={id}
              automationId={id}
              graph={a.graph}
              onSaved={(saved) => {
                queries.setQueryData(['automation', id], saved);
                void queries.invalidateQueries({ queryKey: ['automations'] });
              }}
            />
          ) : (
            <GraphView graph={a.graph} />
          )}
        </Suspense>
      )}
    </Page>
  );
}

/** Starts a run of the automation for one contact (manual trigger). */
function RunOnContact({ automationId, active }: { automationId: number; active: boolean }) {
  const [contactId, setContactId] = useState('');
  const start = useMutation({
    mutationFn: () => api('post', '/automations/{id}/runs', { params: { id: automationId }, body: { contactId: Number(contactId) } }),
  });
  const submit = (e: FormEvent) => {
    e.preventDefault();
    start.mutate();
  };
  return (
    <form className="card inline-form" onSubmit={submit} noValidate aria-label="Run on a contact">
      <ContactPicker value={contactId} onChange={setContactId} noneLabel="Choose a contact" />
      <button
        type="submit"
        className="button-primary"
        disabled={!contactId || start.isPending || !active}
        title={active ? undefined : 'Activate the automation first'}
      >
        Run on a contact
      </button>
      {start.error ? <Alert>{describeError(start.error)}</Alert> : null}
      {start.data && (
        <Alert kind="success">
          Started <Link href={`~/app/runs/${start.data.runId}`}>run {start.data.runId}</Link>.
        </Alert>
      )}
    </form>
  );
}

export function AutomationsPage() {
  return (
    <Switch>
      <Route path="/" component={AutomationList} />
      <Route path="/:id">
        {(p) => {
          const id = idOf(p.id);
          return id === null ? <NotFoundPage /> : <AutomationDetail id={id} />;
        }}
      </Route>
    </Switch>
  );
}
