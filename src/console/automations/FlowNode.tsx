import { Handle, Position, type Node, type NodeProps } from '@xyflow/react';
import { kindLabel } from './catalog';

export interface StepNodeData extends Record<string, unknown> {
  /** The node's type in the graph (trigger, condition or a step type). */
  kind: string;
  summary: string;
  /** Named by the last refused save. */
  invalid?: boolean;
  /** A run's path: ✓ on the nodes it went through. */
  taken?: boolean;
}

export type StepNode = Node<StepNodeData, 'step'>;

/** A node of the automation graph: its kind, a line saying what it does, and its handles. */
function StepNodeView({ data, isConnectable }: NodeProps<StepNode>) {
  const { kind } = data;
  return (
    <div className={`auto-node auto-node-${kind}${data.invalid ? ' auto-node-invalid' : ''}`}>
      {kind !== 'trigger' && <Handle type="target" position={Position.Top} isConnectable={isConnectable} />}
      <div className="auto-node-kind">
        {data.taken ? '✓ ' : ''}
        {kindLabel(kind)}
        {data.invalid ? <span className="auto-node-flag"> (invalid)</span> : null}
      </div>
      <div className="auto-node-summary">{data.summary}</div>
      {kind === 'condition' ? (
        <>
          <div className="auto-node-branches" aria-hidden="true">
            <span>true</span>
            <span>false</span>
          </div>
          <Handle type="source" id="true" position={Position.Bottom} isConnectable={isConnectable} className="handle-true" />
          <Handle type="source" id="false" position={Position.Bottom} isConnectable={isConnectable} className="handle-false" />
        </>
      ) : (
        <Handle type="source" position={Position.Bottom} isConnectable={isConnectable} />
      )}
    </div>
  );
}

export const nodeTypes = { step: StepNodeView };
