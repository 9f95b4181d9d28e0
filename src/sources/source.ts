/**
 * The seam between the controllers and a kind of model source (an OCI artifact, a Hugging Face repository, ...).
 * The controllers know only this interface and the table (index.ts): a ServedModel asks for the files its agents
 * place, a ModelPreheat for the job that warms them; both ask first whether the admin's lists let the source's
 * credentials be read at all. A kind owns its reference grammar's use, its credentials, its client (every answer
 * read through a budget.ts budget: bytes, entries, one deadline per resolution), its task tags (private content
 * tagged by its credentials) and its translation to files. A new kind is a file here, a row in index.ts and a
 * row in src/api/sources.ts: no controller changes.
 */
import type {
  PreheatSource,
  PreheatSourceStatus,
  SourceMember,
  SourcePreheat,
  SourceStatus,
} from '../api/index.ts';
import type { ModelVersionSpec } from '../place/spec.ts';
import type { CredentialReach } from '../policy/reach.ts';

/** What an agent places for a source: the agent's version spec less the version and directory a driver gives. */
export type SourceModelFiles = Omit<ModelVersionSpec, 'version' | 'directory'>;

/** The object whose spec.source is resolved (a ServedModel or a ModelPreheat), as far as a kind needs it. */
export interface SourceOwner {
  /** namespace/name: what a kind keeps for the object is kept under it. */
  key: string;
  uid: string;
  namespace: string;
  generation: number;
  /** The peerload.io/refresh-source annotation's value ('' when absent). */
  refresh: string;
  /** status.source as the object records it: a kind reads what it resolved to there, so a restart pins it. */
  recorded: Pick<SourceStatus, SourceMember | 'observedGeneration' | 'refresh'> | undefined;
}

/** Why a source could not be resolved, as a condition says it. */
export interface SourceFailure<R extends string = string> {
  ok: false;
  /** Only a spec (or annotation, or Secret) edit tries again; else a later pass does. */
  final: boolean;
  /** The kind's own reason (NotModelPack, HubTokenRequired, ...). */
  reason: R;
  /** Names the field to change (`spec.source.<member>...`); never a credential or a remote host's own words. */
  message: string;
}

/** A ServedModel's source resolved for this pass: what its agents place and what its status and preheat say. */
export interface ResolvedSource<R extends string = string> {
  ok: true;
  files: SourceModelFiles;
  /** Files (or layers) and their bytes. */
  count: number;
  bytes: number;
  /** The content's identity (a manifest digest, a listing's digest): the registration's identity. */
  digest: string;
  status: SourceStatus;
  /** What the owned preheat warms; undefined when there is nothing a preheat may warm, and then why. */
  preheat: SourcePreheat | undefined;
  unpreheatable?: { reason: R; message: string } | undefined;
}

export type SourceFiles<R extends string = string> = ResolvedSource<R> | SourceFailure<R>;

/** What a ModelPreheat's job of a source is: files by URL, or an OCI manifest the manager reads itself. */
export type SourceJobContent =
  | {
      type: 'file';
      urls: string[];
      /** Query parameters left out of the task ids. */
      filter: string[];
      /** The credentials' task tag: only in the job's request, never written to the object. */
      tag?: string | undefined;
    }
  | { type: 'image'; url: string; credentialsSecretRef?: { name: string } | undefined };

export type SourceJob<R extends string = string> =
  | {
      ok: true;
      content: SourceJobContent;
      /** What the source resolved to (a commit, a digest): part of the job's content key. */
      resolved: string;
      status: PreheatSourceStatus;
    }
  | { ok: false; failure: SourceFailure<R>; status: PreheatSourceStatus };

/** One kind of source. `S` is its member of spec.source. */
export interface SourceKind<S = unknown> {
  readonly member: SourceMember;
  /**
   * Whether the admin's lists let the source's credentials be read and sent where the source names (asked before
   * anything else: a refused source reads no Secret and sends nothing).
   */
  reach(source: S, field: string): CredentialReach;
  /** The files a ServedModel's agents place (resolved once per generation or refresh value, then kept). */
  files(owner: SourceOwner, source: S, field: string, signal?: AbortSignal): Promise<SourceFiles>;
  /** The job a ModelPreheat of the source creates. Throws only for a Secret that cannot be read. */
  job(owner: SourceOwner, source: S, field: string, signal?: AbortSignal): Promise<SourceJob>;
  /** Drops what is kept for an object. */
  forget(key: string): void;
}

/** A spec.source (a ServedModel's or a ModelPreheat's): one member set. */
export type AnySource = PreheatSource;
