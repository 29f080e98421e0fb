import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useEffect, useId, useState, type FormEvent } from 'react';
import { Link } from 'wouter';
import { api, ApiError, describeError, fieldError, type BodyOf, type ResultOf } from '../api/client';
import { useCan, useMe } from '../app/session';
import { Alert, ErrorAlert } from '../ui/Alert';
import { ConfirmButton } from '../ui/ConfirmButton';
import { Field, SelectField } from '../ui/Field';

type Channels = ResultOf<'/settings/channels', 'get'>;
type Channel = keyof Channels;
type ChannelView = Channels[Channel];
type Provider = ChannelView['provider'];
type ExternalProvider = Exclude<Provider, 'outbox'>;
type ChannelInput = NonNullable<BodyOf<'/settings/channels', 'put'>[Channel]>;

interface SettingSpec {
  key: string;
  label: string;
  kind: 'text' | 'email' | 'url' | 'port' | 'checkbox';
  initial: string | boolean;
  hint?: string;
}

interface ProviderSpec {
  label: string;
  settings: SettingSpec[];
  credentials: { key: string; label: string; secret: boolean }[];
  /** How the stored credentials are named in "… stored". */
  credentialsName: string;
  /** The provider refuses to work without credentials (so they cannot be cleared, only replaced). */
  credentialsRequired: boolean;
  /** The settings that decide where the credentials go: changing one needs them again (API.md 8). */
  destination: string[];
  destinationName: string;
}

/** The fields each provider takes (src/core/services/channels.ts checks them the same way). */
const PROVIDERS: Record<ExternalProvider, ProviderSpec> = {
  smtp: {
    label: 'SMTP server',
    settings: [
      { key: 'host', label: 'SMTP host', kind: 'text', initial: '', hint: 'A host name or IP address, e.g. smtp.example.com' },
      { key: 'port', label: 'Port', kind: 'port', initial: '587', hint: '587 for STARTTLS, 465 for TLS from the start' },
      { key: 'from', label: 'From address', kind: 'email', initial: '' },
      { key: 'secure', label: 'Use TLS from the start (implicit TLS, usually 465)', kind: 'checkbox', initial: false },
      { key: 'requireTLS', label: 'Require STARTTLS (never send unencrypted)', kind: 'checkbox', initial: false },
    ],
    credentials: [
      { key: 'user', label: 'Username', secret: false },
      { key: 'pass', label: 'Password', secret: true },
    ],
    credentialsName: 'Username and password',
    credentialsRequired: false,
    destination: ['host', 'port', 'secure', 'requireTLS'],
    destinationName: 'host, port or TLS mode',
  },
  twilio: {
    label: 'Twilio-compatible API',
    settings: [
      { key: 'accountSid', label: 'Account SID', kind: 'text', initial: '' },
      { key: 'from', label: 'From number or sender ID', kind: 'text', initial: '', hint: 'e.g. +15551234567' },
      { key: 'baseUrl', label: 'API base URL', kind: 'url', initial: 'https://api.twilio.com' },
    ],
    credentials: [{ key: 'authToken', label: 'Auth token', secret: true }],
    credentialsName: 'Auth token',
    credentialsRequired: true,
    destination: ['baseUrl'],
    destinationName: 'API base URL',
  },
  whatsapp: {
    label: 'WhatsApp Cloud API',
    settings: [
      { key: 'phoneNumberId', label: 'Phone number ID', kind: 'text', initial: '' },
      { key: 'baseUrl', label: 'API base URL', kind: 'url', initial: 'https://graph.facebook.com/v20.0' },
    ],
    credentials: [{ key: 'accessToken', label: 'Access token', secret: true }],
    credentialsName: 'Access token',
    credentialsRequired: true,
    destination: ['baseUrl'],
    destinationName: 'API base URL',
  },
};

const CHANNELS: { channel: Channel; title: string; noun: string; provider: ExternalProvider; outbox: string }[] = [
  {
    channel: 'EMAIL',
    title: 'Email',
    noun: 'email',
    provider: 'smtp',
    outbox: 'Emails are recorded in Deliveries and marked sent; nothing leaves the server.',
  },
  {
    channel: 'SMS',
    title: 'SMS',
    noun: 'SMS',
    provider: 'twilio',
    outbox: 'SMS messages are recorded in Deliveries and marked sent; nothing leaves the server.',
  },
  {
    channel: 'WHATSAPP',
    title: 'WhatsApp',
    noun: 'WhatsApp',
    provider: 'whatsapp',
    outbox: 'WhatsApp messages are recorded in Deliveries and marked sent; nothing leaves the server.',
  },
];

type Values = Record<string, string | boolean>;

/** The form's values for a provider: what is stored when it is the stored provider, else its defaults. */
function valuesFor(view: ChannelView, provider: Provider): Values {
  if (provider === 'outbox') return {};
  const stored = view.provider === provider ? view.settings : {};
  return Object.fromEntries(
    PROVIDERS[provider].settings.map((s) => {
      const v = stored[s.key];
      if (s.kind === 'checkbox') return [s.key, typeof v === 'boolean' ? v : s.initial];
      return [s.key, v === undefined || v === null ? s.initial : String(v)];
    }),
  );
}

/** The settings object sent: text trimmed, an empty field left out (the API names what is missing). */
function settingsOut(provider: ExternalProvider, values: Values): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const s of PROVIDERS[provider].settings) {
    const v = values[s.key];
    if (typeof v === 'boolean') out[s.key] = v;
    else if (typeof v === 'string' && v.trim()) out[s.key] = s.kind === 'port' && /^\d{1,9}$/.test(v.trim()) ? Number(v.trim()) : v.trim();
  }
  return out;
}

/** The error at exactly this pointer (not one of its children). */
function errorAt(err: unknown, pointer: string): string | undefined {
  if (!(err instanceof ApiError)) return undefined;
  const message = err.errors.find((e) => e.path === pointer)?.message;
  return message && message[0]!.toUpperCase() + message.slice(1);
}

/** Channels: which provider delivers each channel, with write-only credentials (ADMIN and above). */
export function ChannelsSection() {
  const channels = useQuery({ queryKey: ['channels'], queryFn: () => api('get', '/settings/channels') });
  return (
    <section aria-labelledby="channels-heading">
      <h2 id="channels-heading">Channels</h2>
      <p>
        Each channel sends through a provider. The built-in outbox records every message and marks it sent, so everything works without an outside service.
        Credentials are stored encrypted and are never shown again: replace or clear them instead.
      </p>
      <ErrorAlert error={channels.error} />
      {channels.isPending && <p className="loading">Loading the channel settings…</p>}
      {channels.data &&
        CHANNELS.map((c) => (
          <ChannelForm
            key={c.channel}
            channel={c.channel}
            title={c.title}
            noun={c.noun}
            external={c.provider}
            outboxText={c.outbox}
            view={channels.data[c.channel]}
          />
        ))}
      <TestEmail />
    </section>
  );
}

function ChannelForm({
  channel,
  title,
  noun,
  external,
  outboxText,
  view,
}: {
  channel: Channel;
  title: string;
  noun: string;
  external: ExternalProvider;
  outboxText: string;
  view: ChannelView;
}) {
  const queries = useQueryClient();
  const headingId = useId();
  const [provider, setProvider] = useState<Provider>(view.provider);
  const [values, setValues] = useState<Values>(() => valuesFor(view, view.provider));
  const [replacing, setReplacing] = useState(false);
  const [creds, setCreds] = useState<Record<string, string>>({});
  const [saved, setSaved] = useState<string | null>(null);

  // A new stored state (after a save, or a refetch) resets the form to it; credentials typed
  // into the form are dropped with it, so they are never kept on the page after the save.
  const resetTo = (stored: ChannelView) => {
    setProvider(stored.provider);
    setValues(valuesFor(stored, stored.provider));
    setReplacing(false);
    setCreds({});
  };
  const viewKey = JSON.stringify(view);
  // biome-ignore lint/correctness/useExhaustiveDependencies: the stored state, compared by value
  useEffect(() => resetTo(view), [viewKey]);

  const save = useMutation({
    mutationFn: (input: ChannelInput) => api('put', '/settings/channels', { body: { [channel]: input } }),
    onSuccess: (next, input) => {
      resetTo(next[channel]);
      queries.setQueryData(['channels'], next);
      setSaved(input.credentials && Object.keys(input.credentials).length === 0 ? 'The credentials are cleared.' : `The ${noun} settings are saved.`);
    },
  });

  const spec = provider === 'outbox' ? null : PROVIDERS[provider];
  const baseline = valuesFor(view, provider);
  const settingsChanged = provider !== view.provider || JSON.stringify(values) !== JSON.stringify(baseline);
  const entered = Object.fromEntries(Object.entries(creds).filter(([, v]) => v !== ''));
  const dirty = settingsChanged || Object.keys(entered).length > 0;
  const stored = view.provider === provider && view.hasCredentials;
  const destinationChanged = !!spec && stored && spec.destination.some((k) => values[k] !== baseline[k]);
  const credentialsError = errorAt(save.error, `/${channel}/credentials`);
  const showInputs = !!spec && (!stored || replacing || destinationChanged || !!credentialsError);

  const edit = (f: () => void) => {
    setSaved(null);
    if (save.error) save.reset();
    f();
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setSaved(null);
    const input: ChannelInput = { provider };
    if (provider !== 'outbox') {
      input.settings = settingsOut(provider, values);
      // Left out, the stored credentials are kept (when the destination stays the same).
      if (Object.keys(entered).length) input.credentials = entered;
    }
    save.mutate(input);
  };

  // Every pointer the form shows next to a field; anything else goes in the message on top.
  const shown = new Set([`/${channel}/provider`, `/${channel}/credentials`]);
  for (const s of spec?.settings ?? []) shown.add(`/${channel}/settings/${s.key}`);
  for (const c of spec?.credentials ?? []) shown.add(`/${channel}/credentials/${c.key}`);
  const elsewhere = save.error instanceof ApiError ? save.error.errors.filter((e) => !shown.has(e.path)) : [];
  const generalError = save.error && (!(save.error instanceof ApiError) || save.error.errors.length === 0 || elsewhere.length > 0);

  return (
    <section className="card channel" aria-labelledby={headingId}>
      <h3 id={headingId}>{title}</h3>
      <form onSubmit={submit} noValidate aria-label={`${title} channel`}>
        {saved && <Alert kind="success">{saved}</Alert>}
        {generalError ? (
          <Alert>
            {describeError(save.error)}
            {elsewhere.length > 0 && (
              <ul>
                {elsewhere.map((e) => (
                  <li key={e.path}>
                    <code>{e.path}</code> {e.message}
                  </li>
                ))}
              </ul>
            )}
          </Alert>
        ) : null}
        <SelectField
          label="Provider"
          value={provider}
          onChange={(e) =>
            edit(() => {
              const next = e.target.value as Provider;
              setProvider(next);
              setValues(valuesFor(view, next));
              setCreds({});
              setReplacing(false);
            })
          }
          error={fieldError(save.error, `/${channel}/provider`)}
          options={[
            { value: 'outbox', label: 'Built-in outbox (sends nothing)' },
            { value: external, label: PROVIDERS[external].label },
          ]}
        />
        {!spec && <p className="hint outbox-hint">{outboxText}</p>}
        {spec && (
          <div className="grid-2">
            {spec.settings
              .filter((s) => s.kind !== 'checkbox')
              .map((s) => (
                <Field
                  key={s.key}
                  label={s.label}
                  type={s.kind === 'port' ? 'number' : s.kind === 'email' ? 'email' : s.kind === 'url' ? 'url' : 'text'}
                  inputMode={s.kind === 'port' ? 'numeric' : undefined}
                  min={s.kind === 'port' ? 1 : undefined}
                  max={s.kind === 'port' ? 65535 : undefined}
                  autoComplete="off"
                  value={values[s.key] as string}
                  onChange={(e) => edit(() => setValues((v) => ({ ...v, [s.key]: e.target.value })))}
                  error={fieldError(save.error, `/${channel}/settings/${s.key}`)}
                  hint={s.hint}
                />
              ))}
          </div>
        )}
        {spec?.settings
          .filter((s) => s.kind === 'checkbox')
          .map((s) => (
            <Checkbox
              key={s.key}
              label={s.label}
              checked={values[s.key] === true}
              onChange={(checked) => edit(() => setValues((v) => ({ ...v, [s.key]: checked })))}
              error={fieldError(save.error, `/${channel}/settings/${s.key}`)}
            />
          ))}
        {spec && (
          <fieldset className="credentials">
            <legend>Credentials</legend>
            <p className="credential-status">
              {spec.credentialsName}: {stored ? <span className="badge badge-ok">stored</span> : <span className="badge badge-muted">not set</span>}
            </p>
            {credentialsError && (
              <p className="field-error" role="alert">
                {credentialsError}
              </p>
            )}
            {destinationChanged && !credentialsError && (
              <p className="hint">Changing the {spec.destinationName} needs the credentials again: the stored ones are not sent to a new destination.</p>
            )}
            {showInputs && (
              <>
                {stored && <p className="hint">What you enter here replaces every stored credential of this channel.</p>}
                {!stored && !spec.credentialsRequired && <p className="hint">Leave these empty if the server needs no sign-in.</p>}
                <div className="grid-2">
                  {spec.credentials.map((c) => (
                    <Field
                      key={c.key}
                      label={c.label}
                      type={c.secret ? 'password' : 'text'}
                      autoComplete={c.secret ? 'new-password' : 'off'}
                      value={creds[c.key] ?? ''}
                      onChange={(e) => edit(() => setCreds((v) => ({ ...v, [c.key]: e.target.value })))}
                      error={fieldError(save.error, `/${channel}/credentials/${c.key}`)}
                    />
                  ))}
                </div>
              </>
            )}
            {stored && (
              <div className="actions credential-actions">
                {replacing ? (
                  <button
                    type="button"
                    className="button-secondary"
                    onClick={() =>
                      edit(() => {
                        setReplacing(false);
                        setCreds({});
                      })
                    }
                  >
                    Keep the stored credentials
                  </button>
                ) : (
                  !destinationChanged && (
                    <button type="button" className="button-secondary" onClick={() => edit(() => setReplacing(true))}>
                      Replace credentials
                    </button>
                  )
                )}
                {!spec.credentialsRequired && view.provider !== 'outbox' && (
                  <ConfirmButton
                    label="Clear credentials"
                    ariaLabel={`Clear credentials of the ${noun} channel`}
                    question={`Clear the stored ${spec.credentialsName.toLowerCase()}? The ${noun} channel then signs in to nothing.`}
                    onConfirm={() => {
                      setSaved(null);
                      // Only the credentials change: the stored settings go back as they are.
                      return save.mutateAsync({ provider: view.provider, settings: view.settings, credentials: {} });
                    }}
                  />
                )}
              </div>
            )}
            {stored && spec.credentialsRequired && <p className="hint">This provider needs them; choose the outbox to stop using them.</p>}
          </fieldset>
        )}
        <button type="submit" className="button-primary" disabled={save.isPending || !dirty}>
          Save {noun} settings
        </button>
      </form>
    </section>
  );
}

function Checkbox({ label, checked, onChange, error }: { label: string; checked: boolean; onChange: (checked: boolean) => void; error?: string | undefined }) {
  const id = useId();
  return (
    <div className={`checkbox${error ? ' field-invalid' : ''}`}>
      <input
        id={id}
        type="checkbox"
        checked={checked}
        onChange={(e) => onChange(e.target.checked)}
        aria-invalid={error ? true : undefined}
        aria-describedby={error ? `${id}-error` : undefined}
      />
      <label htmlFor={id}>{label}</label>
      {error && (
        <p className="field-error" id={`${id}-error`}>
          {error}
        </p>
      )}
    </div>
  );
}

const TEST_SUBJECT = 'Test email from svc';
const TEST_TEXT = 'This is a test email sent from the svc console to check the workspace\u2019s email settings.';

/** POST /messages/test-email (MEMBER and above, rate limited with previews), then the attempt's outcome. */
function TestEmail() {
  const me = useMe();
  const canSend = useCan('MEMBER');
  const [to, setTo] = useState(me.user.email);
  const [attemptId, setAttemptId] = useState<number | null>(null);
  const send = useMutation({
    mutationFn: () => api('post', '/messages/test-email', { body: { to: to.trim(), subject: TEST_SUBJECT, text: TEST_TEXT } }),
    onSuccess: (accepted) => setAttemptId(accepted.deliveryAttemptId),
  });
  const attempt = useQuery({
    queryKey: ['delivery-attempt', attemptId],
    queryFn: () => api('get', '/messages/delivery-attempts/{id}', { params: { id: attemptId! } }),
    enabled: attemptId !== null,
    refetchInterval: (q) => (q.state.data && (q.state.data.status === 'SENT' || q.state.data.status === 'FAILED') ? false : 1000),
  });
  if (!canSend) return null;
  const toError = fieldError(send.error, '/to');
  const a = attempt.data;
  return (
    <section className="card" aria-labelledby="test-email-heading">
      <h3 id="test-email-heading">Send a test email</h3>
      <p>
        Sends a short message through the saved email settings (not unsaved changes above). Test emails count against the same per-person limit as previews.
      </p>
      <form
        className="inline-form"
        noValidate
        aria-label="Send a test email"
        onSubmit={(e) => {
          e.preventDefault();
          setAttemptId(null);
          send.mutate();
        }}
      >
        <Field label="Send to" type="email" autoComplete="email" value={to} onChange={(e) => setTo(e.target.value)} error={toError} />
        <button type="submit" className="button-secondary" disabled={send.isPending || !to.trim()}>
          Send test email
        </button>
      </form>
      {send.error && !toError ? <Alert>{describeError(send.error)}</Alert> : null}
      {attemptId !== null && (
        <div className="test-email-result">
          {!a || a.status === 'QUEUED' || a.status === 'SENDING' ? (
            <Alert kind="info">Sending the test email…</Alert>
          ) : a.status === 'SENT' ? (
            <Alert kind="success">
              The test email to {a.to} was sent through {a.provider === 'outbox' ? 'the built-in outbox' : a.provider.toUpperCase()}.
            </Alert>
          ) : (
            <Alert>
              The test email to {a.to} failed: {a.error ?? 'no reason given'}.
            </Alert>
          )}
          <p>
            <Link href={`~/app/deliveries/${attemptId}`}>View the delivery</Link>
          </p>
        </div>
      )}
      <ErrorAlert error={attempt.error} />
    </section>
  );
}
