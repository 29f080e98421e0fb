import { useInfiniteQuery, useMutation } from '@tanstack/react-query';
import { useEffect, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import { api, apiUrl, download } from '../api/client';
import { useCan } from '../app/session';
import { ErrorAlert } from '../ui/Alert';
import { DataTable } from '../ui/DataTable';
import { formatTime, Page } from '../ui/Page';
import { usePagedList } from '../ui/paging';

const PAGE = 50;
/** Requests the list makes by itself to fill its first page when pages come back short. */
const AUTO_PAGES = 20;

/** The search parameters with one set, or removed when empty. */
function withParam(params: URLSearchParams, name: string, value: string): URLSearchParams {
  if (value) params.set(name, value);
  else params.delete(name);
  return params;
}

/** The contacts list: search (q) and tag filter in the address, cursor pages on demand. */
export function ContactsPage() {
  const canWrite = useCan('MEMBER');
  const [params, setParams] = useSearchParams();
  const q = params.get('q') ?? '';
  const tag = params.get('tag') ?? '';
  const [search, setSearch] = useState(q);
  useEffect(() => setSearch(q), [q]);

  // The search is applied a moment after typing stops.
  useEffect(() => {
    if (search === q) return;
    const timer = setTimeout(() => setParams((p) => withParam(p, 'q', search), { replace: true }), 300);
    return () => clearTimeout(timer);
  }, [search, q, setParams]);

  // Every tag is a choice: the filter's list reads the tags a page at a time ("More tags").
  const { query: tags, rows: tagRows } = usePagedList({
    queryKey: ['tags', 'filter'],
    fetchPage: (cursor) => api('get', '/tags', { query: { limit: 200, cursor } }),
  });
  const contacts = useInfiniteQuery({
    queryKey: ['contacts', { q, tag }],
    queryFn: ({ pageParam }) => api('get', '/contacts', { query: { limit: PAGE, q: q || undefined, tag: tag || undefined, cursor: pageParam } }),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.nextCursor ?? undefined,
  });
  const rows = contacts.data?.pages.flatMap((p) => p.data) ?? [];
  // A search matching few contacts comes back in short or empty pages, each the result of a
  // bounded part of the list (API: GET /contacts): go on by itself until a page's worth more
  // is shown, for at most AUTO_PAGES requests at a time; then "Load more" goes on.
  const filters = `${q}\n${tag}`;
  const [asked, setMore] = useState({ filters, want: PAGE, from: 0 });
  // A new search starts over.
  const more = asked.filters === filters ? asked : { filters, want: PAGE, from: 0 };
  const fetched = contacts.data?.pages.length ?? 0;
  useEffect(() => {
    if (contacts.hasNextPage && !contacts.isFetching && !contacts.error && rows.length < more.want && fetched - more.from < AUTO_PAGES)
      void contacts.fetchNextPage();
  }, [contacts, rows.length, fetched, more]);

  // The export has the list's filters; it is streamed by the server and saved by the browser.
  const exporting = useMutation({
    mutationFn: () =>
      download(
        apiUrl('/contacts/export', { format: 'csv', q: q || undefined, tag: tag || undefined }),
        `contacts-${new Date().toISOString().slice(0, 10)}.csv`,
      ),
  });

  return (
    <Page
      title="Contacts"
      actions={
        <>
          <button type="button" className="button-secondary" onClick={() => exporting.mutate()} disabled={exporting.isPending}>
            {exporting.isPending ? 'Exporting…' : q || tag ? 'Export these as CSV' : 'Export CSV'}
          </button>
          {canWrite && (
            <Link href="/contacts/import" className="button button-secondary">
              Import
            </Link>
          )}
          {canWrite && (
            <Link href="/contacts/new" className="button button-primary">
              New contact
            </Link>
          )}
        </>
      }
    >
      <form className="toolbar" aria-label="Filter contacts" onSubmit={(e) => e.preventDefault()}>
        <div className="field">
          <label htmlFor="contact-search">Search</label>
          <input id="contact-search" type="search" value={search} placeholder="Email, phone or name" onChange={(e) => setSearch(e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor="contact-tag">Tag</label>
          <select id="contact-tag" value={tag} onChange={(e) => setParams((p) => withParam(p, 'tag', e.target.value))}>
            <option value="">All tags</option>
            {tagRows?.map((t) => (
              <option key={t.name} value={t.name}>
                {t.name} ({t.count})
              </option>
            ))}
            {/* A tag from the address that is not among the tags loaded so far. */}
            {tag && tagRows && !tagRows.some((t) => t.name === tag) && <option value={tag}>{tag}</option>}
          </select>
        </div>
        {tags.hasNextPage && (
          <button type="button" className="button-secondary" onClick={() => void tags.fetchNextPage()} disabled={tags.isFetchingNextPage}>
            {tags.isFetchingNextPage ? 'Loading…' : 'More tags'}
          </button>
        )}
      </form>
      <ErrorAlert error={contacts.error ?? exporting.error} />
      <DataTable
        caption="Contacts"
        loading={contacts.isPending && 'Loading contacts…'}
        rows={rows}
        rowKey={(c) => c.id}
        empty={q || tag ? (contacts.hasNextPage ? 'No contact matches in the part of the list searched so far.' : 'No contact matches.') : 'No contacts yet.'}
        columns={[
          {
            header: 'Name',
            cell: (c) => (
              <Link href={`/contacts/${c.id}`}>{[c.firstName, c.lastName].filter(Boolean).join(' ') || c.email || c.phone || `Contact ${c.id}`}</Link>
            ),
          },
          { header: 'Email', cell: (c) => c.email ?? '—' },
          { header: 'Phone', cell: (c) => c.phone ?? '—' },
          {
            header: 'Tags',
            cell: (c) =>
              c.tags.map((t) => (
                <span key={t} className="tag">
                  {t}
                </span>
              )),
          },
          { header: 'Updated', cell: (c) => formatTime(c.updatedAt) },
        ]}
      />
      {contacts.hasNextPage && (
        <p>
          <button
            type="button"
            className="button-secondary"
            onClick={() => {
              setMore({ filters, want: rows.length + PAGE, from: fetched });
              void contacts.fetchNextPage();
            }}
            disabled={contacts.isFetchingNextPage}
          >
            {contacts.isFetchingNextPage ? 'Loading…' : 'Load more'}
          </button>
        </p>
      )}
    </Page>
  );
}
