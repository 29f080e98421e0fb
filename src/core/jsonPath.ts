/**
 * Dot paths into a JSON body: `customer.email`, `form.fields[1].value`, `data["first name"]`
 * is not supported; a key is any run of characters other than `.`, `[` and `]`.
 * Only own properties are read, so `__proto__` or `constructor` never reach a prototype.
 */
export type PathSegment = string | number;

const SEGMENT_RE = /^([^.[\]]+)((?:\[\d{1,9}\])*)$/;

export function parsePath(path: string): PathSegment[] | undefined {
  if (path.length === 0 || path.length > 256) return undefined;
  const segments: PathSegment[] = [];
  for (const part of path.split('.')) {
    const m = SEGMENT_RE.exec(part);
    if (!m) return undefined;
    segments.push(m[1]!);
    for (const idx of m[2]!.matchAll(/\[(\d+)\]/g)) segments.push(Number(idx[1]));
  }
  return segments;
}

export function readPath(value: unknown, segments: readonly PathSegment[]): unknown {
  let current: unknown = value;
  for (const seg of segments) {
    if (typeof seg === 'number') {
      if (!Array.isArray(current) || seg >= current.length) return undefined;
      current = current[seg];
    } else {
      if (current === null || typeof current !== 'object' || Array.isArray(current) || !Object.hasOwn(current, seg)) return undefined;
      current = (current as Record<string, unknown>)[seg];
    }
  }
  return current;
}

/** One key as a JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`. */
export function escapePointerKey(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}
