import { useMutation } from '@tanstack/react-query';
import { useEffect, useLayoutEffect, useRef, useState, type FormEvent } from 'react';
import { api, ApiError, describeError } from '../api/client';
import { Alert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { SelectField } from '../ui/Field';
import { useTemplateOptions } from '../templates/options';
import { StepFields } from './StepFields';
import { STEP_DESCRIPTIONS, STEP_FIELDS, STEP_LABELS, STEP_TYPES, type StepType } from '../steps/catalog';
import { blankStep, describeStep, fromApi, toApi, type StepDraft, type StepProblem } from './stepCatalog';
import type { WorkflowSectionProps } from './types';

type Problems = Map<string, StepProblem[]>;

/**
 * The 422 pointers under /steps/N, filed under the key of the step that was at N when the
 * request was made (so they follow their step when it is moved); the rest apart.
 */
function spread(err: unknown, keys: string[]): { byStep: Problems; rest: { path: string; message: string }[] } {
  const byStep: Problems = new Map();
  const rest: { path: string; message: string }[] = [];
  if (!(err instanceof ApiError)) return { byStep, rest };
  for (const e of err.errors) {
    const m = /^\/steps\/(\d+)(\/.*)?$/.exec(e.path);
    const key = m ? keys[Number(m[1])] : undefined;
    if (m && key) byStep.set(key, [...(byStep.get(key) ?? []), { path: m[2] ?? '', message: e.message }]);
    else if (!m && e.path.startsWith('/steps')) rest.push(e);
  }
  return { byStep, rest };
}

const capital = (s: string) => s[0]!.toUpperCase() + s.slice(1);

/** The message at a field of a step (or under it: "/tags" finds "/tags/0"). */
function problemAt(problems: StepProblem[] | undefined, path: string): string | undefined {
  const hit = problems?.find((p) => p.path === path || p.path.startsWith(`${path}/`));
  return hit && capital(hit.message);
}

/** Steps as an ordered list: add, move, remove, and edit each one's fields; Save sends them all. */
export function StepsEditor({ workflow, canWrite, onSaved, activationError }: WorkflowSectionProps) {
  const { options: templates, more: moreTemplates } = useTemplateOptions();
  const savedJson = JSON.stringify(workflow.steps);
  const [draft, setDraft] = useState<StepDraft[]>(() => workflow.steps.map(fromApi));
  const [dirty, setDirty] = useState(false);
  const [problems, setProblems] = useState<Problems>(new Map());
  const [saved, setSaved] = useState(false);
  const [newType, setNewType] = useState<StepType>('send_email');
  const [announcement, setAnnouncement] = useState('');
  const focusNext = useRef<string | null>(null);
  const draftRef = useRef(draft);
  draftRef.current = draft;

  // A new saved version (this page's save, or another tab's) replaces the list.
  const lastSaved = useRef(savedJson);
  useEffect(() => {
    if (lastSaved.current === savedJson) return;
    lastSaved.current = savedJson;
    setDraft((JSON.parse(savedJson) as Record<string, unknown>[]).map(fromApi));
    setDirty(false);
  }, [savedJson]);

  // A refused activation names steps by their position in the saved list, which is the draft's while unchanged.
  useEffect(() => {
    setProblems(
      activationError
        ? spread(
            activationError,
            draftRef.current.map((s) => s.key),
          ).byStep
        : new Map(),
    );
  }, [activationError]);

  // Keeps keyboard focus on what was moved, added or removed.
  useLayoutEffect(() => {
    const id = focusNext.current;
    if (!id) return;
    focusNext.current = null;
    let el = document.getElementById(id);
    // A new step: its first input. A move that reached an end: the other move button.
    if (id.endsWith('-body')) el = el?.querySelector<HTMLElement>('input, select, textarea') ?? null;
    else if (el instanceof HTMLButtonElement && el.disabled)
      el = document.getElementById(id.replace(/-(up|down)$/, (_, d: string) => (d === 'up' ? '-down' : '-up')));
    el?.focus();
  });

  const save = useMutation({
    mutationFn: ({ steps }: { steps: Record<string, unknown>[]; keys: string[] }) =>
      api('patch', '/workflows/{id}', { params: { id: workflow.id }, body: { steps } }),
    onSuccess: (w) => {
      setProblems(new Map());
      setDirty(false);
      setSaved(true);
      onSaved(w);
    },
    onError: (err, { keys }) => setProblems(spread(err, keys).byStep),
  });

  const change = (next: StepDraft[]) => {
    setDraft(next);
    setDirty(true);
    setSaved(false);
  };
  const patchStep = (key: string, patch: Partial<StepDraft>) => change(draft.map((s) => (s.key === key ? { ...s, ...patch } : s)));
  const move = (index: number, by: -1 | 1) => {
    const next = [...draft];
    const [step] = next.splice(index, 1);
    next.splice(index + by, 0, step!);
    change(next);
    focusNext.current = `${step!.key}-${by < 0 ? 'up' : 'down'}`;
    setAnnouncement(`${STEP_LABELS[step!.type]} moved to position ${index + by + 1} of ${next.length}.`);
  };
  const remove = (index: number) => {
    const step = draft[index]!;
    change(draft.filter((s) => s.key !== step.key));
    focusNext.current = 'steps-heading';
    setAnnouncement(`Step ${index + 1}, ${STEP_LABELS[step.type]}, removed.`);
  };
  const add = () => {
    const step = blankStep(newType);
    change([...draft, step]);
    focusNext.current = `${step.key}-body`;
    setAnnouncement(`${STEP_LABELS[newType]} added as step ${draft.length + 1}.`);
  };
  const discard = () => {
    setDraft(workflow.steps.map(fromApi));
    setDirty(false);
    setProblems(new Map());
    save.reset();
  };

  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    const converted = draft.map((d) => ({ key: d.key, ...toApi(d) }));
    const local: Problems = new Map(converted.filter((c) => c.problems.length).map((c) => [c.key, c.problems]));
    if (local.size) {
      setProblems(local);
      save.reset();
      return;
    }
    save.mutate({ steps: converted.map((c) => c.step), keys: converted.map((c) => c.key) });
  };

  const templateName = (id: number) => templates?.find((t) => t.id === id)?.name;
  const rest = spread(save.error, []).rest;
  const localCount = [...problems.values()].reduce((n, p) => n + p.length, 0);

  if (!canWrite) {
    return (
      <section className="card" aria-labelledby="steps-heading">
        <h2 id="steps-heading">Steps</h2>
        {draft.length === 0 ? (
          <p className="empty">No steps.</p>
        ) : (
          <ol className="step-summary">
            {draft.map((s) => (
              <li key={s.key}>
                <strong>{STEP_LABELS[s.type]}</strong> <span>{describeStep(s, templateName)}</span>
              </li>
            ))}
          </ol>
        )}
      </section>
    );
  }

  return (
    <section className="card" aria-labelledby="steps-heading">
      <h2 id="steps-heading" tabIndex={-1}>
        Steps
      </h2>
      <p className="hint">
        {workflow.triggerSource === 'WEBHOOK'
          ? 'Each run goes through the steps in order, for the contact the webhook names.'
          : 'Each run would go through the steps in order, for one contact; but this manual workflow has no trigger, so nothing starts its runs (the API has no call for it, and replays are only for a webhook’s events).'}
      </p>
      <form onSubmit={submit} noValidate aria-label="Steps">
        {saved && <Alert kind="success">Saved.</Alert>}
        {save.error ? (
          <Alert>
            {describeError(save.error)}
            {localCount > 0 ? ': see the fields marked below.' : ''}
            {rest.length > 0 && (
              <ul>
                {rest.map((e) => (
                  <li key={e.path}>{capital(e.message)}</li>
                ))}
              </ul>
            )}
          </Alert>
        ) : localCount > 0 && !activationError ? (
          <Alert>Some steps need attention: see the fields marked below.</Alert>
        ) : null}
        {draft.length === 0 ? (
          <p className="empty">No steps yet: add the first one below.</p>
        ) : (
          <ol className="step-list">
            {draft.map((s, i) => {
              const own = problems.get(s.key);
              const stray = (own ?? []).filter((p) => !STEP_FIELDS[s.type].some((f) => p.path === `/${f}` || p.path.startsWith(`/${f}/`)));
              return (
                <li key={s.key} className={`step${own?.length ? ' step-invalid' : ''}`}>
                  <fieldset>
                    <legend className="step-legend">
                      <span className="visually-hidden">
                        Step {i + 1}: {STEP_LABELS[s.type]}
                      </span>
                      <span aria-hidden="true">
                        <span className="step-number">{i + 1}</span> {STEP_LABELS[s.type]}
                      </span>
                    </legend>
                    <div className="step-tools">
                      <button
                        type="button"
                        id={`${s.key}-up`}
                        className="button-secondary"
                        aria-label={`Move up step ${i + 1}`}
                        disabled={i === 0}
                        onClick={() => move(i, -1)}
                      >
                        <span aria-hidden="true">↑</span> Move up
                      </button>
                      <button
                        type="button"
                        id={`${s.key}-down`}
                        className="button-secondary"
                        aria-label={`Move down step ${i + 1}`}
                        disabled={i === draft.length - 1}
                        onClick={() => move(i, 1)}
                      >
                        <span aria-hidden="true">↓</span> Move down
                      </button>
                      <ConfirmButton
                        label="Remove"
                        ariaLabel={`Remove step ${i + 1}`}
                        question={`Remove step ${i + 1} (${STEP_LABELS[s.type]})? It is gone from the workflow when you save the steps.`}
                        onConfirm={async () => remove(i)}
                      />
                    </div>
                    <p className="hint step-what">{STEP_DESCRIPTIONS[s.type]}</p>
                    {stray.map((p) => (
                      <p key={p.path} className="field-error">
                        {p.path ? <code>{p.path.slice(1)}</code> : null} {capital(p.message)}
                      </p>
                    ))}
                    <div className="step-body" id={`${s.key}-body`}>
                      <StepFields
                        step={s}
                        number={i + 1}
                        templates={templates}
                        moreTemplates={moreTemplates}
                        onChange={(patch) => patchStep(s.key, patch)}
                        error={(path) => problemAt(own, path)}
                      />
                    </div>
                  </fieldset>
                </li>
              );
            })}
          </ol>
        )}
        <div className="step-add">
          <SelectField
            label="New step"
            value={newType}
            onChange={(e) => setNewType(e.target.value as StepType)}
            options={STEP_TYPES.map((t) => ({ value: t, label: `${STEP_LABELS[t]} — ${STEP_DESCRIPTIONS[t]}` }))}
          />
          <button type="button" className="button-secondary" onClick={add}>
            Add step
          </button>
        </div>
        <div className="step-save">
          <button type="submit" className="button-primary" disabled={save.isPending}>
            Save steps
          </button>
          {dirty && (
            <>
              <button type="button" className="button-secondary" onClick={discard}>
                Discard changes
              </button>
              <span className="unsaved">Unsaved changes</span>
            </>
          )}
        </div>
      </form>
      <div className="visually-hidden" aria-live="polite">
        {announcement}
      </div>
    </section>
  );
}
