import { useMutation } from '@tanstack/react-query';
import { Background, Controls, ReactFlow, ReactFlowProvider, useReactFlow, type Connection, type Edge, type EdgeChange, type NodeChange } from '@xyflow/react';
import { useCallback, useEffect, useMemo, useRef, useState, type DragEvent } from 'react';
import { api, ApiError, describeError, type ResultOf } from '../api/client';
import { useTemplateOptions } from '../templates/options';
import { Alert } from '../ui/Alert';
import { SelectField } from '../ui/Field';
import { kindLabel, layout, NODE_KINDS, newNodeData, nodeSummary, type Graph, type GraphNode, type Position } from './catalog';
import { nodeTypes, type StepNode } from './FlowNode';
import { useHistory } from './history';
import { NodeFields, type TemplateOption } from './NodeFields';

type Automation = ResultOf<'/automations/{id}', 'patch'>;

interface EdNode extends GraphNode {
  position: Position;
}
interface EdEdge {
  id: string;
  from: string;
  to: string;
  branch?: boolean | undefined;
}
/** The graph being edited: the API's, with every node placed and every edge named. */
interface EdGraph {
  nodes: EdNode[];
  edges: EdEdge[];
}

/** A problem of the last refused save, tied to what it names. */
interface Problem {
  nodeId?: string;
  edgeId?: string;
  /** Under the node: "data/condition", "type", ... */
  field?: string;
  message: string;
}

interface Selection {
  nodes: string[];
  edges: string[];
}

const NOTHING: Selection = { nodes: [], edges: [] };
const MIME = 'application/x-svc-node-type';
/** A new node's size, to centre it where it is dropped. */
const NODE_W = 200;
const NODE_H = 60;

function fromGraph(graph: Graph): EdGraph {
  const at = layout(graph);
  return {
    nodes: graph.nodes.map((n) => ({ id: n.id, type: n.type, data: n.data, position: at.get(n.id)! })),
    edges: graph.edges.map((e, i) => ({ id: `edge_${i + 1}`, from: e.from, to: e.to, branch: e.branch })),
  };
}

/** What Save sends: positions rounded (they are kept), edge names dropped. */
function toGraph(g: EdGraph): Graph {
  return {
    nodes: g.nodes.map((n) => ({ id: n.id, type: n.type, data: n.data, position: { x: Math.round(n.position.x), y: Math.round(n.position.y) } })),
    edges: g.edges.map((e) => ({ from: e.from, to: e.to, ...(e.branch === undefined ? {} : { branch: e.branch }) })),
  };
}

function freeId(base: string, taken: Set<string>): string {
  if (base === 'trigger' && !taken.has(base)) return base;
  let n = 1;
  while (taken.has(`${base}_${n}`)) n++;
  return `${base}_${n}`;
}

function isTyping(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  return target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName);
}

/** A 422 invalid_graph's pointers (/graph/nodes/N/…, /graph/edges/N) as the nodes and edges sent. */
function problemsOf(err: unknown, sent: EdGraph): Problem[] {
  if (!(err instanceof ApiError) || err.status !== 422) return [];
  return err.errors.map((e) => {
    const m = /^\/graph\/(nodes|edges)\/(\d+)(?:\/(.*))?$/.exec(e.path);
    if (m?.[1] === 'nodes') {
      const node = sent.nodes[Number(m[2])];
      return { ...(node ? { nodeId: node.id } : {}), ...(m[3] ? { field: m[3] } : {}), message: e.message };
    }
    if (m?.[1] === 'edges') {
      const edge = sent.edges[Number(m[2])];
      return { ...(edge ? { edgeId: edge.id } : {}), ...(m[3] ? { field: m[3] } : {}), message: e.message };
    }
    return { message: `${e.path.replace(/^\/graph\/?/, '') || 'graph'} ${e.message}` };
  });
}

function capitalize(s: string): string {
  return s ? s[0]!.toUpperCase() + s.slice(1) : s;
}

export interface EditorProps {
  automationId: number;
  graph: Graph;
  onSaved: (automation: Automation) => void;
}

/** The visual editor of an automation's graph (MEMBER and up). */
export default function Editor(props: EditorProps) {
  return (
    <ReactFlowProvider>
      <EditorCanvas {...props} />
    </ReactFlowProvider>
  );
}

function EditorCanvas({ automationId, graph, onSaved }: EditorProps) {
  const history = useHistory(() => fromGraph(graph));
  const g = history.present;
  const [saved, setSaved] = useState(() => JSON.stringify(toGraph(fromGraph(graph))));
  const dirty = JSON.stringify(toGraph(g)) !== saved;
  const [selection, setSelection] = useState<Selection>(NOTHING);
  const [measured, setMeasured] = useState<Record<string, { width: number; height: number }>>({});
  const [problems, setProblems] = useState<Problem[]>([]);
  const flow = useReactFlow();
  const canvas = useRef<HTMLElement>(null);
  const present = useRef(g);
  present.current = g;
  /** The graph before the drag in progress, recorded as one undo step when it ends. */
  const dragStart = useRef<EdGraph | null>(null);

  const { options: loadedTemplates, more: moreTemplates } = useTemplateOptions();
  const templateOptions: TemplateOption[] = useMemo(() => loadedTemplates ?? [], [loadedTemplates]);
  const templateName = useCallback((id: number) => templateOptions.find((t) => t.id === id)?.name, [templateOptions]);

  const byId = useMemo(() => new Map(g.nodes.map((n) => [n.id, n])), [g.nodes]);
  const nameOf = useCallback(
    (id: string) => {
      const n = byId.get(id);
      if (!n) return `node ${id}`;
      const summary = nodeSummary(n, templateName);
      return n.type === 'trigger' ? 'Trigger' : `${kindLabel(n.type)} “${summary}”`;
    },
    [byId, templateName],
  );

  // What the canvas draws: the graph, with the selection, the sizes React Flow measured and
  // the problems of the last refused save.
  const invalidNodes = useMemo(() => new Set(problems.flatMap((p) => (p.nodeId ? [p.nodeId] : []))), [problems]);
  const invalidEdges = useMemo(() => new Set(problems.flatMap((p) => (p.edgeId ? [p.edgeId] : []))), [problems]);
  const rfNodes: StepNode[] = useMemo(
    () =>
      g.nodes.map((n) => {
        const summary = nodeSummary(n, templateName);
        const invalid = invalidNodes.has(n.id);
        return {
          id: n.id,
          type: 'step',
          position: n.position,
          data: { kind: n.type, summary, invalid },
          selected: selection.nodes.includes(n.id),
          ariaLabel: `${kindLabel(n.type)}: ${summary}${invalid ? ' (invalid)' : ''}`,
          className: `node-${n.type}${invalid ? ' node-invalid' : ''}`,
          ...(measured[n.id] ? { measured: measured[n.id] } : {}),
        };
      }),
    [g.nodes, selection.nodes, measured, invalidNodes, templateName],
  );
  const rfEdges: Edge[] = useMemo(
    () =>
      g.edges.map((e) => {
        const invalid = invalidEdges.has(e.id);
        const branch = e.branch === undefined ? '' : ` (${e.branch})`;
        return {
          id: e.id,
          source: e.from,
          target: e.to,
          sourceHandle: e.branch === undefined ? null : String(e.branch),
          selected: selection.edges.includes(e.id),
          ariaLabel: `Edge from ${nameOf(e.from)}${branch} to ${nameOf(e.to)}${invalid ? ' (invalid)' : ''}`,
          ...(e.branch === undefined ? {} : { label: String(e.branch) }),
          ...(invalid ? { className: 'edge-invalid' } : {}),
        };
      }),
    [g.edges, selection.edges, invalidEdges, nameOf],
  );

  const select = useCallback((kind: keyof Selection, id: string, on: boolean) => {
    setSelection((s) => {
      const has = s[kind].includes(id);
      if (has === on) return s;
      return { ...s, [kind]: on ? [...s[kind], id] : s[kind].filter((x) => x !== id) };
    });
  }, []);

  const onNodesChange = useCallback(
    (changes: NodeChange<StepNode>[]) => {
      const sizes: Record<string, { width: number; height: number }> = {};
      const moved = new Map<string, Position>();
      let dragging = false;
      let dropped = false;
      for (const c of changes) {
        if (c.type === 'dimensions' && c.dimensions) sizes[c.id] = c.dimensions;
        else if (c.type === 'select') select('nodes', c.id, c.selected);
        else if (c.type === 'position') {
          if (c.position) moved.set(c.id, c.position);
          if (c.dragging) dragging = true;
          else dropped = true;
        }
      }
      if (Object.keys(sizes).length) setMeasured((m) => ({ ...m, ...sizes }));
      if (!moved.size && !dropped) return;
      const move = (g: EdGraph) => (moved.size ? { ...g, nodes: g.nodes.map((n) => (moved.has(n.id) ? { ...n, position: moved.get(n.id)! } : n)) } : g);
      if (dragging) {
        dragStart.current ??= present.current;
        history.change(move, { transient: true });
      } else if (dragStart.current) {
        history.change(move, { transient: true });
        history.checkpoint(dragStart.current);
        dragStart.current = null;
      } else {
        // Moved with the arrow keys: one undo step per run of moves of the same nodes.
        history.change(move, { coalesce: `move:${[...moved.keys()].join(',')}` });
      }
    },
    [history.change, history.checkpoint, select],
  );

  const onEdgesChange = useCallback(
    (changes: EdgeChange[]) => {
      for (const c of changes) if (c.type === 'select') select('edges', c.id, c.selected);
    },
    [select],
  );

  /** A connection from a handle replaces the way out that handle had (one per output). */
  const onConnect = useCallback(
    (c: Connection) => {
      if (!c.source || !c.target) return;
      const branch = c.sourceHandle === 'true' ? true : c.sourceHandle === 'false' ? false : undefined;
      history.change((g) => {
        const kept = g.edges.filter((e) => !(e.from === c.source && e.branch === branch));
        const ids = new Set(g.edges.map((e) => e.id));
        const id = freeId('edge', ids);
        return { ...g, edges: [...kept, { id, from: c.source, to: c.target, branch }] };
      });
    },
    [history.change],
  );

  const addNode = useCallback(
    (type: string, at: Position) => {
      const id = freeId(type, new Set(present.current.nodes.map((n) => n.id)));
      history.change((g) => ({ ...g, nodes: [...g.nodes, { id, type, data: newNodeData(type), position: at }] }));
      setSelection({ nodes: [id], edges: [] });
    },
    [history.change],
  );

  const addAtCentre = (type: string) => {
    const box = canvas.current?.getBoundingClientRect();
    if (!box) return;
    const centre = flow.screenToFlowPosition({ x: box.left + box.width / 2, y: box.top + box.height / 2 });
    // Below the centre's nodes, so that a node added there hides none.
    const at = { x: centre.x - NODE_W / 2, y: centre.y - NODE_H / 2 };
    const near = (n: EdNode) => Math.abs(n.position.x - at.x) < NODE_W + 10 && Math.abs(n.position.y - at.y) < NODE_H + 20;
    for (let i = 0; i < 50 && g.nodes.some(near); i++) at.y += NODE_H + 30;
    addNode(type, at);
  };

  const onDragOver = (e: DragEvent) => {
    if (!e.dataTransfer.types.includes(MIME)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  };
  const onDrop = (e: DragEvent) => {
    const type = e.dataTransfer.getData(MIME);
    if (!type) return;
    e.preventDefault();
    const at = flow.screenToFlowPosition({ x: e.clientX, y: e.clientY });
    addNode(type, { x: at.x - NODE_W / 2, y: at.y - NODE_H / 2 });
  };

  const deleteSelection = useCallback(() => {
    const nodes = new Set(selection.nodes);
    const edges = new Set(selection.edges);
    if (!nodes.size && !edges.size) return;
    history.change((g) => {
      const next = {
        nodes: g.nodes.filter((n) => !nodes.has(n.id)),
        edges: g.edges.filter((e) => !edges.has(e.id) && !nodes.has(e.from) && !nodes.has(e.to)),
      };
      return next.nodes.length === g.nodes.length && next.edges.length === g.edges.length ? g : next;
    });
    setSelection(NOTHING);
  }, [selection, history.change]);

  /** The way out of a node's output, chosen in the side panel (the keyboard's way to connect). */
  const setNext = useCallback(
    (from: string, branch: boolean | undefined, to: string) => {
      history.change((g) => {
        const kept = g.edges.filter((e) => !(e.from === from && e.branch === branch));
        if (!to) return { ...g, edges: kept };
        return { ...g, edges: [...kept, { id: freeId('edge', new Set(g.edges.map((e) => e.id))), from, to, branch }] };
      });
    },
    [history.change],
  );

  const setNodeData = useCallback(
    (id: string, data: Record<string, unknown>, field: string) => {
      history.change((g) => ({ ...g, nodes: g.nodes.map((n) => (n.id === id ? { ...n, data } : n)) }), { coalesce: `data:${id}:${field}` });
    },
    [history.change],
  );

  const save = useMutation({
    mutationFn: ({ body }: { sent: EdGraph; body: Graph }) => api('patch', '/automations/{id}', { params: { id: automationId }, body: { graph: body } }),
    onSuccess: (automation, { body }) => {
      setSaved(JSON.stringify(body));
      setProblems([]);
      onSaved(automation);
    },
    onError: (err, { sent }) => setProblems(problemsOf(err, sent)),
  });
  const saveNow = () => save.mutate({ sent: g, body: toGraph(g) });

  // Keyboard: Delete/Backspace removes the selection; Ctrl/Cmd+Z undoes; Ctrl/Cmd+Shift+Z
  // and Ctrl+Y redo. Not while typing in a field (the field's own undo applies there).
  const keys = useRef({ undo: history.undo, redo: history.redo, deleteSelection });
  keys.current = { undo: history.undo, redo: history.redo, deleteSelection };
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.defaultPrevented || isTyping(e.target) || document.querySelector('dialog[open]')) return;
      const mod = e.ctrlKey || e.metaKey;
      const key = e.key.toLowerCase();
      if (mod && key === 'z' && !e.shiftKey) {
        e.preventDefault();
        keys.current.undo();
      } else if ((mod && key === 'z' && e.shiftKey) || (e.ctrlKey && key === 'y')) {
        e.preventDefault();
        keys.current.redo();
      } else if (!mod && (e.key === 'Delete' || e.key === 'Backspace')) {
        e.preventDefault();
        keys.current.deleteSelection();
      }
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, []);

  // Leaving the page with unsaved changes asks first.
  useEffect(() => {
    if (!dirty) return;
    const warn = (e: BeforeUnloadEvent) => e.preventDefault();
    window.addEventListener('beforeunload', warn);
    return () => window.removeEventListener('beforeunload', warn);
  }, [dirty]);

  const hasTrigger = g.nodes.some((n) => n.type === 'trigger');
  const selectedNode = selection.nodes.length === 1 && selection.edges.length === 0 ? byId.get(selection.nodes[0]!) : undefined;
  const selectedEdge = selection.edges.length === 1 && selection.nodes.length === 0 ? g.edges.find((e) => e.id === selection.edges[0]) : undefined;
  const selectedCount = selection.nodes.filter((id) => byId.has(id)).length + selection.edges.filter((id) => g.edges.some((e) => e.id === id)).length;

  const describe = (p: Problem): string => {
    if (p.edgeId) {
      const e = g.edges.find((x) => x.id === p.edgeId);
      return e ? `Edge from ${nameOf(e.from)}${e.branch === undefined ? '' : ` (${e.branch})`} to ${nameOf(e.to)}: ${p.message}` : p.message;
    }
    if (p.nodeId) {
      const field = p.field?.replace(/^data\//, '').replace(/\//g, ' ');
      return `${nameOf(p.nodeId)}: ${field ? `${field} ` : ''}${p.message}`;
    }
    return capitalize(p.message);
  };

  return (
    <div className="automation-editor">
      <section className="palette card" aria-labelledby="palette-title">
        <h2 id="palette-title">Add a step</h2>
        <p className="hint">Drag onto the canvas, or press to add at the centre.</p>
        <ul>
          {NODE_KINDS.map((k) => {
            const off = k.type === 'trigger' && hasTrigger;
            return (
              <li key={k.type}>
                <button
                  type="button"
                  className={`palette-item palette-${k.type}`}
                  draggable={!off}
                  disabled={off}
                  title={off ? 'The graph already has its trigger (only one is allowed).' : `${k.description} Drag onto the canvas, or press to add.`}
                  onDragStart={(e) => {
                    e.dataTransfer.setData(MIME, k.type);
                    e.dataTransfer.effectAllowed = 'copy';
                  }}
                  onClick={() => addAtCentre(k.type)}
                >
                  {k.label}
                </button>
              </li>
            );
          })}
        </ul>
      </section>

      <div className="editor-main">
        <div className="editor-toolbar">
          <button type="button" className="button-secondary" onClick={history.undo} disabled={!history.canUndo} title="Undo (Ctrl+Z)">
            Undo
          </button>
          <button type="button" className="button-secondary" onClick={history.redo} disabled={!history.canRedo} title="Redo (Ctrl+Shift+Z or Ctrl+Y)">
            Redo
          </button>
          <button type="button" className="button-danger" onClick={deleteSelection} disabled={selectedCount === 0} title="Delete the selection (Delete key)">
            Delete
          </button>
          <span className={`save-state${dirty ? ' save-state-dirty' : ''}`} role="status">
            {save.isPending ? 'Saving…' : dirty ? 'Unsaved changes' : 'All changes saved'}
          </span>
          <button type="button" className="button-primary" onClick={saveNow} disabled={!dirty || save.isPending}>
            Save
          </button>
        </div>
        {save.error ? (
          <Alert>
            <p className="alert-title">{describeError(save.error)}</p>
            {problems.length > 0 && (
              <ul className="graph-problems">
                {problems.map((p, i) => (
                  // biome-ignore lint/suspicious/noArrayIndexKey: the list is replaced whole on each save
                  <li key={i}>{describe(p)}</li>
                ))}
              </ul>
            )}
          </Alert>
        ) : null}
        <section
          ref={canvas}
          className="graph graph-editor"
          aria-label={`Automation graph editor with ${g.nodes.length} nodes and ${g.edges.length} edges`}
          onDragOver={onDragOver}
          onDrop={onDrop}
        >
          <ReactFlow
            nodes={rfNodes}
            edges={rfEdges}
            nodeTypes={nodeTypes}
            onNodesChange={onNodesChange}
            onEdgesChange={onEdgesChange}
            onConnect={onConnect}
            deleteKeyCode={null}
            fitView
            fitViewOptions={{ maxZoom: 1 }}
            proOptions={{ hideAttribution: true }}
          >
            <Background />
            <Controls showInteractive={false} />
          </ReactFlow>
        </section>
      </div>

      <aside className="inspector card" aria-labelledby="inspector-title">
        {selectedNode ? (
          <>
            <h2 id="inspector-title">{kindLabel(selectedNode.type)}</h2>
            <p className="meta">Node {selectedNode.id}</p>
            {problems
              .filter((p) => p.nodeId === selectedNode.id && !p.field?.startsWith('data/'))
              .map((p, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: the list is replaced whole on each save
                <p key={i} className="field-error">
                  {capitalize(p.field ? `${p.field} ${p.message}` : p.message)}
                </p>
              ))}
            <NodeFields
              key={selectedNode.id}
              node={selectedNode}
              templates={templateOptions}
              moreTemplates={moreTemplates}
              onChange={(data, field) => setNodeData(selectedNode.id, data, field)}
              errorAt={(field) => {
                const p = problems.find((p) => p.nodeId === selectedNode.id && (p.field === `data/${field}` || p.field?.startsWith(`data/${field}/`)));
                return p && capitalize(p.message);
              }}
            />
            <fieldset className="next-steps">
              <legend>Then</legend>
              {(selectedNode.type === 'condition' ? ([true, false] as const) : [undefined]).map((branch) => {
                const current = g.edges.find((e) => e.from === selectedNode.id && e.branch === branch)?.to ?? '';
                return (
                  <SelectField
                    key={String(branch)}
                    label={branch === undefined ? 'Next step' : `When ${branch}`}
                    value={current}
                    onChange={(e) => setNext(selectedNode.id, branch, e.target.value)}
                    options={[
                      { value: '', label: 'Nothing: the run ends' },
                      ...g.nodes.filter((n) => n.type !== 'trigger' && n.id !== selectedNode.id).map((n) => ({ value: n.id, label: nameOf(n.id) })),
                    ]}
                  />
                );
              })}
            </fieldset>
          </>
        ) : selectedEdge ? (
          <>
            <h2 id="inspector-title">Edge</h2>
            <p>
              From {nameOf(selectedEdge.from)}
              {selectedEdge.branch === undefined ? '' : ` (${selectedEdge.branch} branch)`} to {nameOf(selectedEdge.to)}.
            </p>
            {problems
              .filter((p) => p.edgeId === selectedEdge.id)
              .map((p, i) => (
                // biome-ignore lint/suspicious/noArrayIndexKey: the list is replaced whole on each save
                <p key={i} className="field-error">
                  {capitalize(p.message)}
                </p>
              ))}
          </>
        ) : (
          <>
            <h2 id="inspector-title">{selectedCount > 1 ? `${selectedCount} items selected` : 'Nothing selected'}</h2>
            <p className="hint">
              {selectedCount > 1
                ? 'Delete removes them all.'
                : 'Select a node to edit its fields. Connect a node to the next by dragging from its bottom handle to the next one’s top handle.'}
            </p>
          </>
        )}
      </aside>
    </div>
  );
}
