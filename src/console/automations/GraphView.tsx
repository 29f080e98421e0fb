import { Background, Controls, ReactFlow, type Edge, type Node } from '@xyflow/react';
import { useMemo } from 'react';

interface Graph {
  nodes: { id: string; type: string; data: Record<string, unknown>; position?: { x: number; y: number } }[];
  edges: { from: string; to: string; branch?: boolean }[];
}

/** Where a node without a stored position goes: one row per depth from the trigger. */
function layout(graph: Graph): Map<string, { x: number; y: number }> {
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
  const rows = new Map<number, number>();
  const out = new Map<string, { x: number; y: number }>();
  for (const n of graph.nodes) {
    const d = depth.get(n.id) ?? 0;
    const col = rows.get(d) ?? 0;
    rows.set(d, col + 1);
    out.set(n.id, n.position ?? { x: col * 240, y: d * 120 });
  }
  return out;
}

function label(n: Graph['nodes'][number]): string {
  const d = n.data;
  if (n.type === 'trigger') return `Trigger (${String(d.source ?? 'MANUAL').toLowerCase()})`;
  if (n.type === 'condition') return `Condition: ${String(d.condition ?? '')}`;
  const name = n.type.replace(/_/g, ' ');
  if (Array.isArray(d.tags)) return `${name}: ${d.tags.join(', ')}`;
  if (typeof d.seconds === 'number') return `${name} ${d.seconds} s`;
  if (d.templateId !== undefined) return `${name} (template ${String(d.templateId)})`;
  return name;
}

/** The automation's graph, read-only (the editor builds on it). */
export default function GraphView({ graph, taken }: { graph: Graph; taken?: Set<string> | undefined }) {
  const { nodes, edges } = useMemo(() => {
    const at = layout(graph);
    const nodes: Node[] = graph.nodes.map((n) => ({
      id: n.id,
      position: at.get(n.id)!,
      data: { label: taken?.has(n.id) ? `✓ ${label(n)}` : label(n) },
      className: `node-${n.type}${taken ? (taken.has(n.id) ? ' node-taken' : ' node-skipped') : ''}`,
    }));
    const edges: Edge[] = graph.edges.map((e, i) => ({
      id: `e${i}`,
      source: e.from,
      target: e.to,
      ...(e.branch === undefined ? {} : { label: e.branch ? 'true' : 'false' }),
      ...(taken?.has(e.from) && taken.has(e.to) ? { className: 'edge-taken', animated: true } : {}),
    }));
    return { nodes, edges };
  }, [graph, taken]);
  return (
    <section
      className="graph"
      aria-label={taken ? `Path taken: ${taken.size} of ${graph.nodes.length} nodes` : `Automation graph with ${graph.nodes.length} nodes`}
    >
      <ReactFlow nodes={nodes} edges={edges} fitView nodesDraggable={false} nodesConnectable={false} proOptions={{ hideAttribution: true }}>
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </section>
  );
}
