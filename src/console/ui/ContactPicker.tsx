import { useEffect, useState } from 'react';
import { api } from '../api/client';
import { Field, SelectField } from './Field';
import { LoadMore, usePagedList } from './paging';

const PAGE = 50;
/** Requests made by themselves, per search or "Load more", while pages come back short. */
const AUTO_PAGES = 20;

interface Props {
  /** The chosen contact's id, or '' for none. */
  value: string;
  onChange: (id: string) => void;
  /** The choice of no contact ("No contact", "Choose a contact"). */
  noneLabel: string;
}

const nameOf = (c: { id: number; email: string | null; phone: string | null }) => c.email ?? c.phone ?? `Contact ${c.id}`;

/**
 * Picks one contact of the workspace, however many it has: a search (GET /contacts?q=, by
 * email, phone or name) narrows the choices, and "Load more contacts" reaches the rest.
 */
export function ContactPicker({ value, onChange, noneLabel }: Props) {
  const [search, setSearch] = useState('');
  const [q, setQ] = useState('');
  // The search is applied a moment after typing stops.
  useEffect(() => {
    const timer = setTimeout(() => setQ(search.trim()), 300);
    return () => clearTimeout(timer);
  }, [search]);
  const { query, rows = [] } = usePagedList({
    queryKey: ['contacts', 'picker', q],
    fetchPage: (cursor) => api('get', '/contacts', { query: { limit: PAGE, q: q || undefined, cursor } }),
  });
  // The chosen contact stays a choice while another search shows other contacts.
  const [chosen, setChosen] = useState<{ value: string; label: string } | null>(null);

  // A search's pages each cover a bounded part of the list and may come back short or empty
  // (API: GET /contacts): go on by itself for a while until a page's worth is shown.
  const [asked, setAsked] = useState({ q, want: PAGE, from: 0 });
  const more = asked.q === q ? asked : { q, want: PAGE, from: 0 };
  const fetched = query.data?.pages.length ?? 0;
  useEffect(() => {
    if (q && query.hasNextPage && !query.isFetching && !query.error && rows.length < more.want && fetched - more.from < AUTO_PAGES) void query.fetchNextPage();
  }, [q, query, rows.length, fetched, more]);

  const options = rows.map((c) => ({ value: String(c.id), label: nameOf(c) }));
  const kept = chosen && chosen.value === value && !options.some((o) => o.value === value) ? [chosen] : [];
  return (
    <div className="contact-picker">
      <Field label="Find by email, phone or name" type="search" value={search} onChange={(e) => setSearch(e.target.value)} autoComplete="off" />
      <SelectField
        label="Contact"
        value={value}
        onChange={(e) => {
          const option = [...kept, ...options].find((o) => o.value === e.target.value);
          setChosen(option ?? null);
          onChange(e.target.value);
        }}
        options={[{ value: '', label: query.isPending ? 'Loading contacts…' : noneLabel }, ...kept, ...options]}
      />
      {q && !query.isFetching && rows.length === 0 && !query.hasNextPage && <p className="hint">No contact matches “{q}”.</p>}
      <LoadMore
        query={{
          hasNextPage: query.hasNextPage,
          isFetchingNextPage: query.isFetchingNextPage,
          fetchNextPage: () => {
            setAsked({ q, want: rows.length + PAGE, from: fetched });
            return query.fetchNextPage();
          },
        }}
        label="Load more contacts"
      />
    </div>
  );
}
