import { useInfiniteQuery, type QueryKey } from '@tanstack/react-query';
import { useMemo } from 'react';

/** One page of a list of the API: its items, and the cursor of the next page (null at the end). */
export interface ListPage<T> {
  data: T[];
  nextCursor: string | null;
}

interface Options<T> {
  queryKey: QueryKey;
  /** Fetches the page after `cursor` (the first page without one). */
  fetchPage: (cursor: string | undefined) => Promise<ListPage<T>>;
  enabled?: boolean;
  retry?: boolean;
  /** How often to fetch the pages shown again, by the rows they hold; false: only when asked. */
  refetchInterval?: number | false | ((rows: T[]) => number | false);
}

/**
 * A list of the API read a page at a time (GET …?limit=&cursor=): the rows of the pages
 * fetched so far (undefined until the first one has come), and the query, whose next page
 * <LoadMore> fetches.
 */
export function usePagedList<T>({ queryKey, fetchPage, enabled = true, retry = true, refetchInterval = false }: Options<T>) {
  const query = useInfiniteQuery({
    queryKey,
    queryFn: ({ pageParam }) => fetchPage(pageParam),
    initialPageParam: undefined as string | undefined,
    getNextPageParam: (last) => last.nextCursor ?? undefined,
    enabled,
    retry,
    refetchInterval: typeof refetchInterval === 'function' ? (q) => refetchInterval(q.state.data?.pages.flatMap((p) => p.data) ?? []) : refetchInterval,
  });
  const rows = useMemo(() => query.data?.pages.flatMap((p) => p.data), [query.data]);
  return { query, rows };
}

export interface MoreQuery {
  hasNextPage: boolean;
  isFetchingNextPage: boolean;
  fetchNextPage: () => Promise<unknown>;
}

/** The "Load more" button under a paged list, while the API has more of it. */
export function LoadMore({ query, label = 'Load more' }: { query: MoreQuery; label?: string }) {
  if (!query.hasNextPage) return null;
  return (
    <p className="load-more">
      <button type="button" className="button-secondary" onClick={() => void query.fetchNextPage()} disabled={query.isFetchingNextPage}>
        {query.isFetchingNextPage ? 'Loading…' : label}
      </button>
    </p>
  );
}
