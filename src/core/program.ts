import type { AutomationGraph, StepDefinition } from './db/schema.js';

/**
 * The one internal representation both shapes compile to, so there is one executor: an
 * array of steps, entry at index 0, each saying where to go next. A workflow's step array
 * is already one (each step goes on to the one after it); an automation's graph is
 * compiled into one here, with conditions branching to `onTrue`/`onFalse`.
 */
export type ProgramStep = StepDefinition & { next?: number | null; onTrue?: number | null; onFalse?: number | null };

export function nextStep(program: readonly ProgramStep[], index: number, branch?: boolean): number | null {
  const step = program[index]!;
  if (step.type === 'condition') return (branch ? step.onTrue : step.onFalse) ?? null;
  if ('next' in step) return step.next ?? null;
  return index + 1 < program.length ? index + 1 : null;
}

/**
 * Compiles a validated graph: the trigger's successor is the entry; nodes are numbered in
 * breadth-first order from it; nodes the trigger cannot reach are left out.
 */
export function compileGraph(graph: AutomationGraph): ProgramStep[] {
  const out = new Map<string, { to: string; branch?: boolean }[]>();
  for (const e of graph.edges) out.set(e.from, [...(out.get(e.from) ?? []), { to: e.to, ...(e.branch !== undefined ? { branch: e.branch } : {}) }]);
  const trigger = graph.nodes.find((n) => n.type === 'trigger');
  const entry = trigger ? out.get(trigger.id)?.[0]?.to : undefined;
  if (!entry) return [];
  const order: string[] = [];
  const queue = [entry];
  const seen = new Set(queue);
  while (queue.length) {
    const id = queue.shift()!;
    order.push(id);
    for (const e of out.get(id) ?? []) {
      if (seen.has(e.to)) continue;
      seen.add(e.to);
      queue.push(e.to);
    }
  }
  const indexOf = new Map(order.map((id, i) => [id, i]));
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  return order.map((id) => {
    const node = byId.get(id)!;
    const edges = out.get(id) ?? [];
    const target = (e: { to: string } | undefined) => (e ? (indexOf.get(e.to) ?? null) : null);
    if (node.type === 'condition') {
      return {
        type: 'condition',
        nodeId: id,
        ...node.data,
        onTrue: target(edges.find((e) => e.branch === true)),
        onFalse: target(edges.find((e) => e.branch === false)),
      };
    }
    return { type: node.type, nodeId: id, ...node.data, next: target(edges[0]) };
  });
}
