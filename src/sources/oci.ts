/**
 * A ServedModel's `spec.source.oci`, resolved: the manifest digest a tag points to (once per generation, or again
 * when the peerload.io/refresh-source annotation takes a new value), the manifest read and checked whole
 * (ModelPack or modctl's `vnd.cnai` types), and the files the agent beside each replica places: every blob by its
 * registry URL through the node's peer, with its digest, its path (`org.cncf.model.filepath`) or, for a tar
 * layer, the archive to extract, and the registry's Authorization for that registry only: once, as the spec's
 * `registry` header set the files name (place/spec.ts), and a short-lived bearer token scoped to pulling the one
 * repository, never the Secret's user and password unless the admin allows it (--allowed-basic-auth-registry-hosts).
 * A source with credentials gives its blobs' tasks the credentials' tag (withCredentialTag): derived from the
 * Secret's credentials, not the short-lived token, so the tag stays the same across token re-mints.
 *
 * The digest a generation resolved is kept in status.source: after an operator restart the manifest is read by
 * that digest, never by the tag again, so a moved tag changes nothing that runs until the spec (or the annotation)
 * changes. Credentials are read only for a registry of the admin's --allowed-registry-hosts (phase.ts refuses the
 * others before this runs), and go to that registry and its token service only (src/oci/client.ts).
 */
import type { Dispatcher } from 'undici';
import type { OciSource, PreheatSourceStatus, SourcePreheat, SourceStatus } from '../api/index.ts';
import { MAX_HEADER_VALUE } from '../place/spec.ts';
import { RegistryClient, type PullGrant } from '../oci/client.ts';
import { base64SecretCredentials, type RegistryCredentials } from '../oci/credentials.ts';
import { OciError, OciReason, ociBudget } from '../oci/errors.ts';
import { parseModelManifest, type ModelManifest } from '../oci/manifest.ts';
import { formatReference, parseReference, type OciReference } from '../oci/reference.ts';
import type { HostRule } from '../policy/reach.ts';
import type { SourceBudget } from '../http/budget.ts';
import { redact } from '../redact.ts';
import { registryCredentialTag } from '../storage/credential-tag.ts';
import { registryReach } from '../policy/storage-reach.ts';
import { hostAllowed, type CredentialReach } from '../policy/reach.ts';
import { egressRefusal, type EgressLookup } from '../http/egress.ts';
import type {
  ResolvedSource,
  SourceFailure,
  SourceJob,
  SourceJobContent,
  SourceKind,
  SourceModelFiles,
  SourceOwner,
} from './source.ts';

type ModelFiles = SourceModelFiles;

/** An artifact resolved for this generation, with what a preheat of it reads. */
export type ResolvedArtifact = ResolvedSource<SourceReason> & {
  /** The manifest's URL by digest (what an image preheat reads) and each distinct blob's URL. */
  manifestURL: string;
  blobURLs: string[];
  /** What the owned preheat warms (ociPreheat): an artifact always has one. */
  preheat: SourcePreheat;
};

/** What a source resolved to for this generation, or why it did not. */
export type SourceFiles = ResolvedArtifact | (SourceFailure & { reason: SourceReason });

/** The reasons a source is not resolved: the registry's (src/oci/errors.ts), or a missing Secret. */
export type SourceReason = OciReason | 'SecretNotFound' | 'RegistryNotAllowed';

/** Reasons a retry cannot fix until the artifact, the tag or the spec changes. */
const FINAL_REASONS = new Set<string>([
  OciReason.InvalidReference,
  OciReason.InvalidCredentials,
  OciReason.NotModelPack,
  OciReason.UnknownMediaType,
  OciReason.InvalidLayer,
  // A size bound of the resolution (a manifest over its cap, a huge token): the same answers pass it again.
  OciReason.SourceTooLarge,
  OciReason.DigestMismatch,
  OciReason.BasicAuthNotForwarded,
  OciReason.TokenTooLarge,
]);

/**
 * How long the registry's Authorization is handed to agents before it is asked for again: at most this, and at
 * most half the token's lifetime (the token service's `expires_in`), so a registration always starts with a token
 * that has half its life or more left. A placement that outlives it fails its later blobs with a 401; the next
 * pass asks again, and the blobs already fetched are hits of the node's peer.
 */
export const AUTHORIZATION_TTL_MS = 60_000;

/** The spec's header set of the registry's Authorization (place/spec.ts headerSets). */
export const REGISTRY_HEADER_SET = 'registry';

export interface OciSourcesDeps {
  /** The data of a Secret of the namespace, values base64 as the API returns them. */
  secretData(namespace: string, name: string, signal?: AbortSignal): Promise<Record<string, string>>;
  /** Toward the registries. */
  dispatcher: Dispatcher;
  /** The admin's --allowed-registry-hosts. */
  registryHosts: readonly HostRule[];
  /** The admin's --allowed-basic-auth-registry-hosts. */
  basicAuthRegistryHosts?: readonly HostRule[] | undefined;
  maxManifestBytes?: number | undefined;
  /** Name resolution for the anonymous-source check (tests); default the system's. */
  lookup?: EgressLookup | undefined;
  /** One resolution (manifest, challenge, token, authorization) at most, ms (--source-timeout). */
  timeoutMs?: number | undefined;
  now?: () => number;
}

interface Kept {
  uid: string;
  generation: number;
  refresh: string;
  result: SourceFiles;
  /** When the files' Authorization was obtained (0: none needed). */
  authorizedAt: number;
  /** How long it may be handed on, ms. */
  authorizedFor: number;
}

/** The resolved artifacts of each object, per generation and refresh value. */
export class OciSources implements SourceKind<OciSource> {
  readonly member = 'oci' as const;
  private readonly deps: OciSourcesDeps;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: OciSourcesDeps) {
    this.deps = deps;
  }

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /**
   * Credentials are read only for a registry of the admin's --allowed-registry-hosts; anonymous pulls may come
   * from any registry at a public address (the resolution's egress check: an internal one only when listed).
   */
  reach(oci: OciSource, field: string): CredentialReach {
    if (!oci.credentialsSecretRef) return { allowed: true };
    const ref = parseReference(oci.reference);
    const url = `${oci.plainHTTP ? 'http' : 'https'}://${ref.registry}/`;
    const policy = { registryHosts: this.deps.registryHosts };
    return registryReach(url, true, `${field}.reference`, policy, `${field}.credentialsSecretRef`);
  }

  /** The files of the owner's artifact for its generation (resolved now, or kept from an earlier pass). */
  async files(owner: SourceOwner, oci: OciSource, field: string, signal?: AbortSignal): Promise<SourceFiles> {
    const { key, generation, refresh } = owner;
    const kept = this.byKey.get(key);
    const same = kept?.uid === owner.uid && kept.generation === generation && kept.refresh === refresh;
    const fresh =
      kept?.authorizedAt === 0 || this.now() - (kept?.authorizedAt ?? 0) < (kept?.authorizedFor ?? 0);
    if (same && (!kept.result.ok || fresh)) return kept.result;
    // A kept resolution whose Authorization is stale is read again by its digest: the tag is never re-read.
    const pinned = same && kept.result.ok ? kept.result.digest : pinnedDigest(owner, oci);
    const { result, grant } = await this.resolve(owner, oci, field, pinned, signal);
    const now = this.now();
    if (result.ok || result.final)
      this.byKey.set(key, {
        uid: owner.uid,
        generation,
        refresh,
        result,
        authorizedAt: grant?.authorization !== undefined ? now : 0,
        authorizedFor: Math.min(AUTHORIZATION_TTL_MS, (grant?.lifetimeMs ?? Infinity) / 2),
      });
    return result;
  }

  /**
   * A ModelPreheat of the artifact: what a ServedModel's owned preheat of it warms (ociPreheat), the manifest read
   * by the digest status.source recorded for this generation.
   */
  async job(owner: SourceOwner, oci: OciSource, field: string, signal?: AbortSignal): Promise<SourceJob> {
    const r = await this.files(owner, oci, field, signal);
    const recorded: PreheatSourceStatus = {
      observedGeneration: owner.generation,
      ...(owner.refresh !== '' ? { refresh: owner.refresh } : {}),
    };
    if (!r.ok) return { ok: false, failure: r, status: recorded };
    const content: SourceJobContent =
      'image' in r.preheat
        ? {
            type: 'image',
            url: r.preheat.image.url,
            credentialsSecretRef: r.preheat.image.credentialsSecretRef,
          }
        : { type: 'file', urls: (r.preheat as { urls: string[] }).urls, filter: [] };
    return {
      ok: true,
      content,
      resolved: r.digest,
      status: {
        ...recorded,
        oci: r.status.oci,
        files: r.count,
        bytes: r.bytes,
        preheated: content.type === 'file' ? content.urls.length : 0,
      },
    };
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }

  private async resolve(
    owner: SourceOwner,
    oci: OciSource,
    field: string,
    pinned: string | undefined,
    signal?: AbortSignal,
  ): Promise<{ result: SourceFiles; grant?: PullGrant }> {
    let budget: SourceBudget<OciError> | undefined;
    try {
      const ref = parseReference(oci.reference);
      const refused = oci.credentialsSecretRef ? undefined : await this.egress(oci, ref, field);
      if (refused) return { result: refused };
      // One budget for the resolution (manifest, challenge, token, authorization): one deadline, the bytes bounded.
      budget = ociBudget(ref.registry, { timeoutMs: this.deps.timeoutMs });
      const { client, credentials } = await this.client(owner, oci, ref, budget, signal);
      const at: OciReference = pinned !== undefined ? { ...ref, digest: pinned } : ref;
      const fetched = await client.manifest(at, signal);
      const manifest = parseModelManifest(
        fetched.body,
        fetched.digest,
        fetched.contentType,
        formatReference(ref),
      );
      const grant = await client.agentGrant(ref.repository, signal);
      const authorization = boundedAuthorization(grant, ref.registry);
      const status: SourceStatus = {
        oci: { reference: oci.reference, digest: manifest.digest },
        observedGeneration: owner.generation,
        refresh: owner.refresh || undefined,
        layers: manifest.layers.length,
        bytes: manifest.bytes,
      };
      const files = withCredentialTag(
        artifactFiles(client, ref, manifest, authorization, status, oci.maxBytes),
        credentials && registryCredentialTag(client.baseURL, ref.repository, credentials),
      );
      return {
        result: { ...files, preheat: ociPreheat(oci, files) },
        grant,
      };
    } catch (err) {
      if (signal?.aborted) throw err;
      return { result: failure(err, field) };
    } finally {
      budget?.close();
    }
  }

  /**
   * An anonymous registry (any host a tenant names) at an internal address the admin does not list: refused before
   * anything is asked of it (the cloud's metadata service, the apiserver, a node's loopback are not registries).
   */
  private async egress(
    oci: OciSource,
    ref: OciReference,
    field: string,
  ): Promise<Extract<SourceFiles, { ok: false }> | undefined> {
    const url = `${oci.plainHTTP ? 'http' : 'https'}://${ref.registry}/`;
    const refused = await egressRefusal(
      url,
      (u) => hostAllowed(u, this.deps.registryHosts),
      this.deps.lookup,
    );
    if (!refused) return undefined;
    return {
      ok: false,
      final: true,
      reason: 'RegistryNotAllowed',
      message: `${field}.reference: the registry ${refused.message}; an admin lists ${url.slice(0, -1)} in --allowed-registry-hosts to allow it`,
    };
  }

  /** A registry client, with the Secret's credentials when the spec names one (the host was allowed first). */
  private async client(
    owner: SourceOwner,
    oci: OciSource,
    ref: OciReference,
    budget: SourceBudget<OciError>,
    signal?: AbortSignal,
  ): Promise<{ client: RegistryClient; credentials: RegistryCredentials | undefined }> {
    const secret = oci.credentialsSecretRef?.name;
    const credentials =
      secret !== undefined
        ? base64SecretCredentials(await this.deps.secretData(owner.namespace, secret, signal), ref.registry)
        : undefined;
    const client = new RegistryClient(ref.registry, {
      dispatcher: this.deps.dispatcher,
      plainHTTP: oci.plainHTTP === true,
      credentials,
      // Anonymous pulls may come from any public registry (egress above); credentials only from allowed ones.
      allowedHosts: credentials ? this.deps.registryHosts : undefined,
      basicForwardHosts: this.deps.basicAuthRegistryHosts,
      maxManifestBytes: this.deps.maxManifestBytes,
      budget,
    });
    return { client, credentials };
  }
}

/**
 * The grant's Authorization, refused when larger than a header an agent takes (it would refuse the spec): a token
 * is checked as it arrives (src/oci/client.ts); this is forwarded Basic credentials' bound.
 */
function boundedAuthorization(grant: PullGrant, registry: string): string | undefined {
  const a = grant.authorization;
  if (a !== undefined && a.length > MAX_HEADER_VALUE)
    throw new OciError(
      OciReason.TokenTooLarge,
      `the Authorization of ${registry} for the agents is ${a.length} characters, above the ${MAX_HEADER_VALUE} an agent takes as a header`,
    );
  return a;
}

/** The digest status.source recorded for this generation, reference and refresh value, if any. */
export function pinnedDigest(owner: SourceOwner, oci: OciSource): string | undefined {
  const s = owner.recorded;
  if (!s?.oci || s.observedGeneration !== owner.generation) return undefined;
  if (s.oci.reference !== oci.reference || (s.refresh ?? '') !== owner.refresh) return undefined;
  return s.oci.digest;
}

/**
 * The owned preheat of an artifact. Anonymous: the layers' blob URLs as a file preheat (the task ids are the
 * agents', the registry is read by the peers only, and the manager's image preheat dials no loopback or
 * link-local registry). With registry credentials: the manager's image preheat of the manifest by its resolved
 * digest (it asks the registry for a token with them and preheats every blob the manifest references), since a
 * token in the job's headers would be stored in the manager's database and shown in the ModelPreheat. The URL names
 * the digest, so a moved tag is never preheated.
 */
export function ociPreheat(
  oci: OciSource,
  resolved: { manifestURL: string; blobURLs: readonly string[] },
): SourcePreheat {
  const blobs = resolved.blobURLs;
  if (!oci.credentialsSecretRef && blobs.length > 0 && blobs.length <= MAX_PREHEAT_URLS)
    return { urls: [...blobs], filter: [] };
  return { image: { url: resolved.manifestURL, credentialsSecretRef: oci.credentialsSecretRef } };
}

/**
 * The files with the registry credentials' task tag (storage/credential-tag.ts), when the source has credentials:
 * a private blob's task is then named only by holders of the same credentials (the agents of this source, the
 * owned image preheat, `peerload fetch oci://` with them), never by a bare GET of its URL through a node's proxy.
 * An anonymous artifact keeps no tag: its tasks are shared by everyone who pulls it.
 */
export function withCredentialTag<T extends { files: ModelFiles }>(resolved: T, tag: string | undefined): T {
  return tag === undefined ? resolved : { ...resolved, files: { ...resolved.files, tag } };
}

/** URLs one file preheat takes (ModelPreheat spec.urls). */
const MAX_PREHEAT_URLS = 100;

/** What the agents place: each distinct blob once, raw layers on their path, tar layers to extract. */
export function artifactFiles(
  client: Pick<RegistryClient, 'blobURL' | 'baseURL'>,
  ref: OciReference,
  manifest: ModelManifest,
  authorization: string | undefined,
  status: SourceStatus,
  maxBytes?: number,
): Omit<ResolvedArtifact, 'preheat'> {
  // The Authorization once, in the spec's header set; each file names the set.
  const headers = authorization !== undefined ? { headerSet: REGISTRY_HEADER_SET } : {};
  const seen = new Set<string>();
  const files: ModelFiles['files'] = [];
  for (const l of manifest.layers) {
    const url = client.blobURL(ref.repository, l.digest);
    const hex = l.digest.slice('sha256:'.length);
    if (l.format === 'raw') {
      files.push({ path: l.filepath!, url, size: l.size, sha256: hex, layer: l.name, ...headers });
      continue;
    }
    // A tar blob listed twice is extracted once: a second extraction would collide with the first's files.
    if (seen.has(l.digest)) continue;
    seen.add(l.digest);
    files.push({
      path: `sha256-${hex}`,
      url,
      size: l.size,
      sha256: hex,
      layer: l.name,
      extract: l.format,
      ...headers,
    });
  }
  return {
    ok: true,
    // The spec's bound goes to the agents: it caps what the tar layers unpack to, which only they see.
    files: {
      files,
      ...(maxBytes !== undefined ? { maxBytes } : {}),
      ...(authorization !== undefined ? { headerSets: { [REGISTRY_HEADER_SET]: { authorization } } } : {}),
    },
    count: manifest.layers.length,
    bytes: manifest.bytes,
    digest: manifest.digest,
    status,
    manifestURL: `${client.baseURL}/v2/${ref.repository}/manifests/${manifest.digest}`,
    blobURLs: [...new Set(files.map((f) => f.url!))],
  };
}

/** A resolution's failure as the condition says it: the field, the registry's reason and what to fix. */
function failure(err: unknown, field: string): Extract<SourceFiles, { ok: false }> {
  if (err instanceof OciError)
    return {
      ok: false,
      final: FINAL_REASONS.has(err.reason),
      reason: err.reason,
      message: `${field}.reference: ${err.message}`,
    };
  const name = (err as Error).name;
  if (name === 'SecretNotFoundError')
    return {
      ok: false,
      final: false,
      reason: 'SecretNotFound',
      message: `${field}.credentialsSecretRef: ${redact((err as Error).message)}`,
    };
  return {
    ok: false,
    final: false,
    reason: OciReason.RegistryError,
    message: redact((err as Error).message),
  };
}
