import { Background, Controls, ReactFlow, type Edge } from '@xyflow/react';
import { useMemo } from 'react';
import { kindLabel, layout, nodeSummary, type Graph } from './catalog';
import { nodeTypes, type StepNode } from './FlowNode';

// The editor lives in this chunk too: the detail page loads one module, React Flow with it,
// only when a graph is shown (never on the login page).
export { default as GraphEditor } from './Editor';

/** The automation's graph, read-only; with `taken`, the path a run went through highlighted. */
export default function GraphView({ graph, taken }: { graph: Graph; taken?: Set<string> | undefined }) {
  const { nodes, edges } = useMemo(() => {
    const at = layout(graph);
    const nodes: StepNode[] = graph.nodes.map((n) => ({
      id: n.id,
      type: 'step',
      position: at.get(n.id)!,
      data: { kind: n.type, summary: nodeSummary(n), taken: taken?.has(n.id) ?? false },
      ariaLabel: `${kindLabel(n.type)}: ${nodeSummary(n)}`,
      className: `node-${n.type}${taken ? (taken.has(n.id) ? ' node-taken' : ' node-skipped') : ''}`,
    }));
    const edges: Edge[] = graph.edges.map((e, i) => ({
      id: `e${i}`,
      source: e.from,
      target: e.to,
      ...(e.branch === undefined ? {} : { sourceHandle: String(e.branch), label: String(e.branch) }),
      ...(taken?.has(e.from) && taken.has(e.to) ? { className: 'edge-taken', animated: true } : {}),
    }));
    return { nodes, edges };
  }, [graph, taken]);
  return (
    <section
      className="graph"
      aria-label={taken ? `Path taken: ${taken.size} of ${graph.nodes.length} nodes` : `Automation graph with ${graph.nodes.length} nodes`}
    >
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        fitView
        nodesDraggable={false}
        nodesConnectable={false}
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </section>
  );
}
