// The automation graph as the API stores it, and the node catalog the editor offers: the
// trigger, each step type of the workflow catalog (API.md section 3), and the condition.
// No React Flow here: the list page imports it too.

export interface Position {
  x: number;
  y: number;
}

export interface GraphNode {
  id: string;
  type: string;
  data: Record<string, unknown>;
  position?: Position | undefined;
}

export interface GraphEdge {
  from: string;
  to: string;
  branch?: boolean | undefined;
}

export interface Graph {
  nodes: GraphNode[];
  edges: GraphEdge[];
}

export interface NodeKind {
  type: string;
  label: string;
  /** What a new node of this kind starts with. */
  data: () => Record<string, unknown>;
  description: string;
}

export const NODE_KINDS: NodeKind[] = [
  { type: 'trigger', label: 'Trigger', data: () => ({ source: 'MANUAL' }), description: 'Where a run starts (Run on a contact).' },
  { type: 'send_email', label: 'Send email', data: () => ({}), description: 'Sends an email template.' },
  { type: 'send_sms', label: 'Send SMS', data: () => ({}), description: 'Sends an SMS template.' },
  { type: 'send_whatsapp', label: 'Send WhatsApp', data: () => ({}), description: 'Sends a WhatsApp template.' },
  { type: 'wait', label: 'Wait', data: () => ({ seconds: 3600 }), description: 'Waits before the next step.' },
  { type: 'add_tags', label: 'Add tags', data: () => ({ tags: [] }), description: 'Adds tags to the contact.' },
  { type: 'remove_tags', label: 'Remove tags', data: () => ({ tags: [] }), description: 'Removes tags from the contact.' },
  { type: 'update_contact', label: 'Update contact', data: () => ({ set: {} }), description: 'Sets contact fields.' },
  { type: 'http_request', label: 'HTTP request', data: () => ({ method: 'POST', url: 'https://' }), description: 'Calls a URL.' },
  { type: 'filter', label: 'Filter', data: () => ({ condition: '' }), description: 'Ends the run when its condition is false.' },
  { type: 'condition', label: 'Condition', data: () => ({ condition: '' }), description: 'Branches on true or false.' },
];

const KINDS = new Map(NODE_KINDS.map((k) => [k.type, k]));

export function kindLabel(type: string): string {
  return KINDS.get(type)?.label ?? type.replace(/_/g, ' ');
}

export function newNodeData(type: string): Record<string, unknown> {
  return KINDS.get(type)?.data() ?? {};
}

/** The graph a new automation starts with: its trigger. */
export function initialGraph(): Graph {
  return { nodes: [{ id: 'trigger', type: 'trigger', data: { source: 'MANUAL' }, position: { x: 0, y: 0 } }], edges: [] };
}

function plural(n: number, unit: string): string {
  return `${n} ${unit}${n === 1 ? '' : 's'}`;
}

export function durationText(seconds: number): string {
  if (seconds % 86_400 === 0) return plural(seconds / 86_400, 'day');
  if (seconds % 3600 === 0) return plural(seconds / 3600, 'hour');
  if (seconds % 60 === 0) return plural(seconds / 60, 'minute');
  return plural(seconds, 'second');
}

/** One line saying what a node does, shown under its kind. */
export function nodeSummary(n: GraphNode, templateName?: (id: number) => string | undefined): string {
  const d = n.data;
  switch (n.type) {
    case 'trigger':
      return 'Manual: Run on a contact';
    case 'condition':
    case 'filter':
      return typeof d.condition === 'string' && d.condition.trim() ? d.condition : 'No condition yet';
    case 'add_tags':
    case 'remove_tags':
      return Array.isArray(d.tags) && d.tags.length ? d.tags.join(', ') : 'No tags yet';
    case 'wait':
      return typeof d.seconds === 'number' && d.seconds > 0 ? durationText(d.seconds) : 'No duration yet';
    case 'send_email':
    case 'send_sms':
    case 'send_whatsapp': {
      if (typeof d.templateId !== 'number') return 'No template yet';
      return templateName?.(d.templateId) ?? `Template ${d.templateId}`;
    }
    case 'update_contact': {
      const keys = d.set && typeof d.set === 'object' ? Object.keys(d.set) : [];
      return keys.length ? `Sets ${keys.join(', ')}` : 'No fields yet';
    }
    case 'http_request':
      return `${String(d.method ?? 'POST')} ${String(d.url ?? '')}`;
    default:
      return '';
  }
}

/** Where a node without a stored position goes: one row per depth from the trigger. */
export function layout(graph: Graph): Map<string, Position> {
  const depth = new Map<string, number>();
  const trigger = graph.nodes.find((n) => n.type === 'trigger') ?? graph.nodes[0];
  const queue = trigger ? [trigger.id] : [];
  if (trigger) depth.set(trigger.id, 0);
  while (queue.length) {
    const id = queue.shift()!;
    for (const e of graph.edges) {
      if (e.from === id && !depth.has(e.to)) {
        depth.set(e.to, depth.get(id)! + 1);
        queue.push(e.to);
      }
    }
  }
  // Each row centred under the trigger.
  const width = new Map<number, number>();
  for (const n of graph.nodes) width.set(depth.get(n.id) ?? 0, (width.get(depth.get(n.id) ?? 0) ?? 0) + 1);
  const rows = new Map<number, number>();
  const out = new Map<string, Position>();
  for (const n of graph.nodes) {
    const d = depth.get(n.id) ?? 0;
    const col = rows.get(d) ?? 0;
    rows.set(d, col + 1);
    out.set(n.id, n.position ?? { x: (col - ((width.get(d) ?? 1) - 1) / 2) * 240, y: d * 130 });
  }
  return out;
}
