import type { Key, ReactNode } from 'react';

/** One column of a DataTable: its header (the column's accessible name) and how a row fills it. */
export interface Column<Row> {
  header: string;
  /** The header is read by screen readers only (an Actions column). */
  hideHeader?: boolean;
  cell: (row: Row) => ReactNode;
  /** On the column's cells. */
  className?: string;
  /** 'row': the cells are the rows' headers (<th scope="row">). */
  scope?: 'row';
}

interface Props<Row> {
  /** The table's accessible name, read by screen readers only. */
  caption: string;
  columns: Column<Row>[];
  /** A last column of row actions, under a header only screen readers read; left out when false. */
  actions?: ((row: Row) => ReactNode) | false;
  /** The rows; nothing is shown while they are undefined (not loaded, or failed). */
  rows: readonly Row[] | undefined;
  rowKey: (row: Row) => Key;
  rowClassName?: (row: Row) => string | undefined;
  /** More classes for the table, after "table". */
  className?: string;
  /** While the rows load, what to say instead of the table; falsy once they have loaded. */
  loading?: ReactNode;
  /** What to say instead of an empty table; without it an empty table is shown. */
  empty?: ReactNode;
}

/** The console's list table: a hidden caption, column headers, a row per item, and its loading and empty states. */
export function DataTable<Row>({ caption, columns, rows, rowKey, rowClassName, className, loading, empty, actions }: Props<Row>) {
  if (loading) return <p className="loading">{loading}</p>;
  if (!rows) return null;
  if (rows.length === 0 && empty !== undefined) return <p className="empty">{empty}</p>;
  const shown: Column<Row>[] = actions ? [...columns, { header: 'Actions', hideHeader: true, cell: actions }] : columns;
  return (
    <table className={className ? `table ${className}` : 'table'}>
      <caption className="visually-hidden">{caption}</caption>
      <thead>
        <tr>
          {shown.map((c) => (
            <th key={c.header} scope="col" className={c.className}>
              {c.hideHeader ? <span className="visually-hidden">{c.header}</span> : c.header}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <tr key={rowKey(row)} className={rowClassName?.(row)}>
            {shown.map((c) =>
              c.scope === 'row' ? (
                <th key={c.header} scope="row" className={c.className}>
                  {c.cell(row)}
                </th>
              ) : (
                <td key={c.header} className={c.className}>
                  {c.cell(row)}
                </td>
              ),
            )}
          </tr>
        ))}
      </tbody>
    </table>
  );
}
