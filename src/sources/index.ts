/**
 * The model sources the operator knows. A new kind is a file beside `oci.ts` and `huggingface.ts` with a
 * {@link SourceKind}, added to {@link modelSources}, and its row in src/api/sources.ts; the controllers know only
 * {@link ModelSources}, which picks the kind by the member a spec.source sets.
 */
import { getGlobalDispatcher, type Dispatcher } from 'undici';
import {
  REFRESH_SOURCE_ANNOTATION,
  SOURCE_MEMBERS,
  type PreheatSource,
  type SourceMember,
  type SourceStatus,
} from '../api/index.ts';
import type { OperatorConfig } from '../config.ts';
import type { CredentialReach, HostRule } from '../policy/reach.ts';
import { HubSources } from './huggingface.ts';
import { OciSources, type SourceReason as OciSourceReason } from './oci.ts';
import type { HubReason } from '../huggingface/errors.ts';
import type { SourceFiles, SourceJob, SourceKind, SourceOwner } from './source.ts';

export type {
  ResolvedSource,
  SourceFailure,
  SourceFiles,
  SourceJob,
  SourceJobContent,
  SourceModelFiles,
  SourceOwner,
} from './source.ts';

/** Every reason a source's condition may carry: each kind's own, and a Secret that cannot be read. */
export type SourceReason = OciSourceReason | HubReason;

export interface SourceOptions {
  /** The data of a Secret of the namespace, values base64 as the API returns them. */
  secretData(namespace: string, name: string, signal?: AbortSignal): Promise<Record<string, string>>;
  /** One key of a Secret of the namespace, decoded. */
  secretValue(namespace: string, ref: { name: string; key: string }, signal?: AbortSignal): Promise<string>;
  /** The admin's lists: where credentials may go, and where a Hub's redirects may lead. */
  registryHosts: readonly HostRule[];
  basicAuthRegistryHosts?: readonly HostRule[] | undefined;
  hubHosts: readonly HostRule[];
  hubRedirectHosts: readonly HostRule[];
  /** One resolution at most, ms (--source-timeout). */
  timeoutMs?: number | undefined;
  /** Toward the registries and the Hubs (tests reach loopback servers through them). */
  registryDispatcher?: Dispatcher | undefined;
  hubDispatcher?: Dispatcher | undefined;
  maxManifestBytes?: number | undefined;
  now?: () => number;
}

/** The admin's flags the kinds read. */
type SourceFlags = Pick<
  OperatorConfig,
  | 'allowedRegistryHosts'
  | 'allowedBasicAuthRegistryHosts'
  | 'allowedHubHosts'
  | 'allowedHubRedirectHosts'
  | 'sourceTimeout'
>;

/** Every kind of source with the operator's flags, reading the namespace's Secrets through `secrets`. */
export function operatorSources(
  config: SourceFlags,
  secrets: Pick<SourceOptions, 'secretData' | 'secretValue'>,
  more: Pick<SourceOptions, 'registryDispatcher' | 'hubDispatcher' | 'maxManifestBytes'> = {},
): ModelSources {
  return modelSources({
    ...secrets,
    ...more,
    registryHosts: config.allowedRegistryHosts,
    basicAuthRegistryHosts: config.allowedBasicAuthRegistryHosts,
    hubHosts: config.allowedHubHosts,
    hubRedirectHosts: config.allowedHubRedirectHosts,
    timeoutMs: config.sourceTimeout,
  });
}

/** Every kind of source, each with the operator's options. */
export function modelSources(opts: SourceOptions): ModelSources {
  return new ModelSources([
    new OciSources({
      secretData: opts.secretData,
      dispatcher: opts.registryDispatcher ?? getGlobalDispatcher(),
      registryHosts: opts.registryHosts,
      basicAuthRegistryHosts: opts.basicAuthRegistryHosts,
      maxManifestBytes: opts.maxManifestBytes,
      timeoutMs: opts.timeoutMs,
      now: opts.now,
    }),
    new HubSources({
      secretValue: opts.secretValue,
      tokenHosts: opts.hubHosts,
      redirectHosts: opts.hubRedirectHosts,
      dispatcher: opts.hubDispatcher,
      limits: { timeoutMs: opts.timeoutMs },
      now: opts.now,
    }),
  ]);
}

/** What each kind's spec says of itself, with nothing resolved: the table's pure half. */
const SPECS: {
  [M in SourceMember]: {
    /** The source as messages and a registration's identity name it. */
    name(source: NonNullable<PreheatSource[M]>): string;
    /** What a spec pinned to its resolution names as resolved (an owned preheat's content key holds it). */
    pinned(source: NonNullable<PreheatSource[M]>): string | undefined;
  };
} = {
  oci: { name: (s) => s.reference, pinned: (s) => s.reference.split('@')[1] },
  huggingface: { name: (s) => `hf://${s.repo}@${s.revision}`, pinned: (s) => s.revision },
};

function describe(source: PreheatSource): { name: string; pinned: string | undefined } {
  const member = SOURCE_MEMBERS.find((m) => source[m] !== undefined)!;
  const spec = SPECS[member] as { name(s: unknown): string; pinned(s: unknown): string | undefined };
  return { name: spec.name(source[member]), pinned: spec.pinned(source[member]) };
}

/** The source as messages and a registration's identity name it (a reference, `hf://repo@revision`). */
export const sourceName = (source: PreheatSource): string => describe(source).name;

/**
 * What a spec.source already pinned to its resolution names as resolved, as a ModelPreheat's content key holds it
 * (an owned preheat of a Hub repository names the commit as its revision; an OCI reference its digest).
 */
export const pinnedResolution = (source: PreheatSource): string | undefined => describe(source).pinned;

/** The object a spec.source belongs to, as the kinds see it. */
export function sourceOwner(obj: {
  metadata: {
    namespace?: string | undefined;
    name?: string | undefined;
    uid?: string | undefined;
    generation?: number | undefined;
    annotations?: Record<string, string> | undefined;
  };
  status?: { source?: SourceOwner['recorded'] } | undefined;
}): SourceOwner {
  const m = obj.metadata;
  return {
    key: `${m.namespace}/${m.name}`,
    uid: m.uid ?? '',
    namespace: m.namespace ?? '',
    generation: m.generation ?? 0,
    refresh: m.annotations?.[REFRESH_SOURCE_ANNOTATION] ?? '',
    recorded: obj.status?.source,
  };
}

/** The kinds, by the member of spec.source each reads. */
export class ModelSources {
  private readonly kinds = new Map<SourceMember, SourceKind<never>>();

  constructor(kinds: readonly SourceKind<never>[]) {
    for (const k of kinds) this.kinds.set(k.member, k);
    const missing = SOURCE_MEMBERS.filter((m) => !this.kinds.has(m));
    if (missing.length > 0) throw new Error(`no source kind for spec.source.${missing.join(', ')}`);
  }

  /** The kind and member a spec.source sets (the schema admits exactly one). */
  private pick(source: PreheatSource): { kind: SourceKind<unknown>; value: unknown; field: string } {
    const member = SOURCE_MEMBERS.find((m) => source[m] !== undefined)!;
    return {
      kind: this.kinds.get(member) as SourceKind<unknown>,
      value: source[member],
      field: `spec.source.${member}`,
    };
  }

  reach(source: PreheatSource): CredentialReach {
    const { kind, value, field } = this.pick(source);
    return kind.reach(value, field);
  }

  // The kinds' reasons are theirs; SourceReason is their union (each kind's file declares its own).
  files(owner: SourceOwner, source: PreheatSource, signal?: AbortSignal): Promise<SourceFiles<SourceReason>> {
    const { kind, value, field } = this.pick(source);
    return kind.files(owner, value, field, signal) as Promise<SourceFiles<SourceReason>>;
  }

  job(owner: SourceOwner, source: PreheatSource, signal?: AbortSignal): Promise<SourceJob<SourceReason>> {
    const { kind, value, field } = this.pick(source);
    return kind.job(owner, value, field, signal) as Promise<SourceJob<SourceReason>>;
  }

  /**
   * Whether status.source answered another value of the refresh annotation than the object carries now, for this
   * generation: what the status holds is of the resolution before, so the source is resolved again.
   */
  static refreshed(owner: SourceOwner): boolean {
    const r = owner.recorded;
    return (
      r !== undefined && r.observedGeneration === owner.generation && (r.refresh ?? '') !== owner.refresh
    );
  }

  forget(key: string): void {
    for (const k of this.kinds.values()) k.forget(key);
  }
}

/** A status.source with only what a kind reads of it. */
export type RecordedSource = Pick<SourceStatus, SourceMember | 'observedGeneration' | 'refresh'>;
