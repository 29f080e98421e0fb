import { useMemo } from 'react';
import { api } from '../api/client';
import { usePagedList } from '../ui/paging';

export interface TemplateOption {
  id: number;
  name: string;
  channel: 'EMAIL' | 'SMS' | 'WHATSAPP';
}

/**
 * The templates a send step can pick (every channel; each step shows its own), a page at a
 * time: `more` loads the next page (the API lists templates newest first, and has no search).
 */
export function useTemplateOptions() {
  const { query, rows } = usePagedList({
    queryKey: ['templates', 'options'],
    fetchPage: (cursor) => api('get', '/templates', { query: { limit: 100, cursor } }),
  });
  const options = useMemo(() => rows?.map((t): TemplateOption => ({ id: t.id, name: t.name, channel: t.channel })), [rows]);
  return { options, more: query };
}
