import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { type FormEvent, useEffect, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { api, apiUrl, type ResultOf, upload } from '../api/client';
import { useCan, useMe } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { SelectField } from '../ui/Field';
import { formatTime, Page } from '../ui/Page';
import { StatusBadge } from '../ui/StatusBadge';

type ImportJob = ResultOf<'/contacts/imports/{id}', 'get'>;
type Mode = 'upsert' | 'create' | 'update';
type Format = 'auto' | 'csv' | 'ndjson';

const CONTENT_TYPES = { csv: 'text/csv', ndjson: 'application/x-ndjson' } as const;

/** The format a file's name says (`contacts.csv.gz` is CSV), or undefined. */
export function formatOfName(name: string): 'csv' | 'ndjson' | undefined {
  const base = name.toLowerCase().replace(/\.gz$/, '');
  if (base.endsWith('.csv')) return 'csv';
  if (base.endsWith('.ndjson') || base.endsWith('.jsonl')) return 'ndjson';
  return undefined;
}

function count(n: number, one: string, many = `${one}s`): string {
  return `${n.toLocaleString()} ${n === 1 ? one : many}`;
}

/** "2 created, 1 updated, 0 skipped, 3 errors". */
function tally(job: ImportJob): string {
  return `${job.created.toLocaleString()} created, ${job.updated.toLocaleString()} updated, ${job.skipped.toLocaleString()} skipped, ${count(job.errorCount, 'error')}`;
}

/** "532 bytes", "12.4 kB", "104.9 MB". */
export function size(bytes: number): string {
  if (bytes < 1000) return count(bytes, 'byte');
  const [value, unit] = bytes < 1_000_000 ? [bytes / 1000, 'kB'] : [bytes / 1_000_000, 'MB'];
  return `${value.toLocaleString(undefined, { maximumFractionDigits: 1 })} ${unit}`;
}

/** An import job: its progress while it runs (polled each second), then its counts and the rows it refused. */
function ImportProgress({ id }: { id: number }) {
  const queries = useQueryClient();
  const job = useQuery({
    queryKey: ['contact-import', id],
    queryFn: () => api('get', '/contacts/imports/{id}', { params: { id } }),
    refetchInterval: (q) => (q.state.data?.status === 'RUNNING' ? 1_000 : false),
  });
  const status = job.data?.status;
  // Once it has ended, the lists showing contacts and tags read them again.
  useEffect(() => {
    if (status && status !== 'RUNNING') {
      void queries.invalidateQueries({ queryKey: ['contacts'] });
      void queries.invalidateQueries({ queryKey: ['tags'] });
      void queries.invalidateQueries({ queryKey: ['contact-imports'] });
    }
  }, [status, queries]);
  if (job.error) return <ErrorAlert error={job.error} />;
  const j = job.data;
  if (!j) return <p className="loading">Loading the import…</p>;
  const shownErrors = j.errors.length;
  return (
    <section aria-labelledby="import-result">
      <h2 id="import-result">
        Import {j.id} <StatusBadge status={j.status} />
      </h2>
      {j.status === 'RUNNING' && (
        <>
          {j.bytesTotal ? (
            <progress max={j.bytesTotal} value={j.bytesRead} aria-label="Import progress">
              {Math.round((100 * j.bytesRead) / j.bytesTotal)}%
            </progress>
          ) : (
            <progress aria-label="Import progress" />
          )}
          <p role="status">
            Importing: {count(j.lines, 'line')} read
            {j.bytesTotal ? ` (${size(j.bytesRead)} of ${size(j.bytesTotal)})` : ''}, {tally(j)} so far.
          </p>
        </>
      )}
      {j.status === 'COMPLETED' && (
        <Alert kind={j.errorCount ? 'warning' : 'success'}>
          Import finished: {tally(j)} ({count(j.lines, 'line')}).
        </Alert>
      )}
      {j.status === 'FAILED' && (
        <Alert>
          The import stopped: {j.failure?.detail ?? 'it failed'}. What was committed before stays: {tally(j)}.
        </Alert>
      )}
      {shownErrors > 0 && (
        <>
          <h3>Rows not imported</h3>
          <p>
            {j.errorCount > shownErrors ? `The first ${shownErrors} of ${count(j.errorCount, 'row')} refused; ` : ''}
            Fix these rows and import the file again: the rows already imported match their contacts and change nothing more.
          </p>
          <DataTable
            caption="Rows not imported"
            rows={j.errors}
            rowKey={(e) => `${e.line}:${e.field ?? ''}`}
            columns={[
              { header: 'Line', cell: (e) => e.line },
              { header: 'Field', cell: (e) => e.field ?? '—' },
              { header: 'Reason', cell: (e) => e.reason },
            ]}
          />
        </>
      )}
    </section>
  );
}

/**
 * Importing contacts from a CSV or NDJSON file (gzip-compressed or not): the file is sent as
 * it is to POST /contacts/import, and the job it starts is followed to its end. The job shown
 * is in the address (?job=ID), so a reload or a link comes back to it.
 */
export function ContactsImportPage() {
  const me = useMe();
  const canWrite = useCan('MEMBER');
  const [params, setParams] = useSearchParams();
  const jobId = Number(params.get('job')) || null;
  const [file, setFile] = useState<File | null>(null);
  const [mode, setMode] = useState<Mode>('upsert');
  const [format, setFormat] = useState<Format>('auto');
  const [fileError, setFileError] = useState<string>();

  const recent = useQuery({
    queryKey: ['contact-imports'],
    queryFn: () => api('get', '/contacts/imports', { query: { limit: 10 } }),
  });

  // How much of the file the browser has sent: the server imports it as it arrives.
  const [sent, setSent] = useState<{ sent: number; total: number } | null>(null);
  const send = useMutation({
    mutationFn: (args: { file: File; format: 'csv' | 'ndjson'; mode: Mode }) =>
      upload<ImportJob>(
        apiUrl('/contacts/import', { mode: args.mode }),
        args.file,
        {
          'content-type': CONTENT_TYPES[args.format],
          ...(args.file.name.toLowerCase().endsWith('.gz') ? { 'content-encoding': 'gzip' } : {}),
        },
        (bytes, total) => setSent({ sent: bytes, total }),
      ),
    onMutate: () => setSent(null),
    onSuccess: (job) => setParams({ job: String(job.id) }),
    onSettled: () => setSent(null),
  });

  const chosen = file ? (format === 'auto' ? formatOfName(file.name) : format) : undefined;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!file) return setFileError('Choose a file to import.');
    if (!chosen) return setFileError('The file name does not say its format (.csv, .ndjson or .jsonl, optionally .gz): choose the format below.');
    setFileError(undefined);
    send.mutate({ file, format: chosen, mode });
  };

  return (
    <Page
      title="Import contacts"
      actions={
        <Link href="/contacts" className="button button-secondary">
          Back to contacts
        </Link>
      }
    >
      <p>
        A CSV file with a header row (columns <code>email</code>, <code>phone</code>, <code>firstName</code>, <code>lastName</code>, <code>tags</code> separated
        by <code>;</code>, and any other column kept as an attribute), or NDJSON (one contact object a line). A file compressed with gzip (<code>.gz</code>) is
        sent as it is. Each row is matched to a contact by email, then by phone.
      </p>
      {!canWrite ? (
        <Alert kind="info">Importing contacts needs the MEMBER role or above; you have {me.role}.</Alert>
      ) : (
        <form className="form" aria-label="Import a file" onSubmit={submit} noValidate>
          <div className={`field${fileError ? ' field-invalid' : ''}`}>
            <label htmlFor="import-file">File</label>
            <input
              id="import-file"
              type="file"
              accept=".csv,.ndjson,.jsonl,.gz,text/csv,application/x-ndjson"
              aria-invalid={fileError ? true : undefined}
              aria-describedby={fileError ? 'import-file-error' : undefined}
              onChange={(e) => {
                setFile(e.target.files?.[0] ?? null);
                setFileError(undefined);
              }}
            />
            {fileError && (
              <p className="field-error" id="import-file-error">
                {fileError}
              </p>
            )}
            {file && (
              <p className="hint">
                {file.name}: {size(file.size)}
                {chosen ? `, ${chosen === 'csv' ? 'CSV' : 'NDJSON'}` : ''}
              </p>
            )}
          </div>
          <SelectField
            label="Format"
            value={format}
            onChange={(e) => setFormat(e.target.value as Format)}
            options={[
              { value: 'auto', label: 'From the file name' },
              { value: 'csv', label: 'CSV' },
              { value: 'ndjson', label: 'NDJSON' },
            ]}
          />
          <SelectField
            label="Existing contacts"
            value={mode}
            onChange={(e) => setMode(e.target.value as Mode)}
            options={[
              { value: 'upsert', label: 'Update them, and create new ones' },
              { value: 'create', label: 'Leave them as they are; only create new ones' },
              { value: 'update', label: 'Update them; create none' },
            ]}
          />
          <ErrorAlert error={send.error} />
          {send.isPending && sent && (
            <>
              <progress max={sent.total || 1} value={sent.sent} aria-label="Upload progress" />
              <p role="status">
                Sending the file: {size(sent.sent)} of {size(sent.total)}; its rows are imported as they arrive.
              </p>
            </>
          )}
          <div className="form-actions">
            <button type="submit" className="button-primary" disabled={send.isPending}>
              {send.isPending ? 'Uploading…' : 'Import'}
            </button>
          </div>
        </form>
      )}
      {jobId !== null && <ImportProgress key={jobId} id={jobId} />}
      <h2>Recent imports</h2>
      <ErrorAlert error={recent.error} />
      <DataTable
        caption="Recent imports"
        loading={recent.isPending && 'Loading imports…'}
        rows={recent.data?.data}
        rowKey={(j) => j.id}
        empty="No imports yet."
        columns={[
          { header: 'Import', cell: (j) => <Link href={`/contacts/import?job=${j.id}`}>Import {j.id}</Link> },
          { header: 'Status', cell: (j) => <StatusBadge status={j.status} /> },
          { header: 'Result', cell: (j) => tally(j) },
          { header: 'Started', cell: (j) => formatTime(j.createdAt) },
        ]}
      />
    </Page>
  );
}
