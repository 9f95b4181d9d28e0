/**
 * A ServedModel's `spec.source`, whichever member it has: an OCI artifact (oci-source.ts) or a Hugging Face
 * repository (hub-source.ts). Both resolve once per generation (or per value of the peerload.io/refresh-source
 * annotation) to the files the agents place, what status.source records, and what the owned preheat warms.
 */
import type { ServedModel, ServedModelSpec } from '../../api/index.ts';
import type { HubSources, SourceFiles as HubFiles } from './hub-source.ts';
import type { OciSources, SourceFiles as OciFiles } from './oci-source.ts';

export type SourceFiles = OciFiles | HubFiles;
/** A source resolved for this pass. */
export type ResolvedSource = Extract<SourceFiles, { ok: true }>;

type Resolver = Pick<OciSources | HubSources, 'of' | 'forget'>;

export class ModelSources {
  private readonly oci: Resolver;
  private readonly hub: Resolver;

  constructor(oci: Resolver, hub: Resolver) {
    this.oci = oci;
    this.hub = hub;
  }

  of(key: string, sm: ServedModel, spec: ServedModelSpec, signal?: AbortSignal): Promise<SourceFiles> {
    return spec.source?.oci ? this.oci.of(key, sm, spec, signal) : this.hub.of(key, sm, spec, signal);
  }

  forget(key: string): void {
    this.oci.forget(key);
    this.hub.forget(key);
  }
}
