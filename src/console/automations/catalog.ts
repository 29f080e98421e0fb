// The automation graph as the API stores it, and the node catalog the editor offers: the
// trigger, each step type of the shared step catalog (../steps/catalog), and the condition.
// No React Flow here: the list page imports it too.

import { durationText, STEP_DESCRIPTIONS, STEP_LABELS, STEP_TYPES, type StepType } from '../steps/catalog';

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

/** What a new step node starts with. */
const NEW_STEP_DATA: Partial<Record<StepType, () => Record<string, unknown>>> = {
  wait: () => ({ seconds: 3600 }),
  add_tags: () => ({ tags: [] }),
  remove_tags: () => ({ tags: [] }),
  update_contact: () => ({ set: {} }),
  http_request: () => ({ method: 'POST', url: 'https://' }),
  filter: () => ({ condition: '' }),
};

export const NODE_KINDS: NodeKind[] = [
  { type: 'trigger', label: 'Trigger', data: () => ({ source: 'MANUAL' }), description: 'Where a run starts (Run on a contact).' },
  ...STEP_TYPES.map((type) => ({ type, label: STEP_LABELS[type], data: NEW_STEP_DATA[type] ?? (() => ({})), description: STEP_DESCRIPTIONS[type] })),
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
