/**
 * Which phase a ServedModel's reconcile pass is in: a pure function of the object, whether the cache is behind our
 * own last write, the admin's reach policy, the drivers the operator has, and what the pass has done so far. The
 * reconciler runs the phase's step in a `switch` and asks again, until a step ends the pass; every case is
 * unit-tested (test/unit/servedmodel-phase.test.ts).
 *
 * The order is the order of the questions that can stop a pass: an object that is gone or not yet ours to read,
 * a spec the operator will not act on (invalid, endpoints it may not reach, a driver it does not have), deletion, a
 * Staged rollout the driver cannot do,
 * a layout the driver cannot load; then the steps of a pass that serves the model: the finalizer, a source's
 * resolution (spec.source, before the gates, whose owned preheat is of the digest it resolved to), the preheat
 * gates, a directory's listing, one step on every replica, and the report (status, Ready, Events).
 */
import { staticAddresses, ServedModelSpec, type ServedModel } from '../../api/index.ts';
import { endpointsReach, type CredentialReachReason, type ReachPolicy } from '../../policy/reach.ts';
import { storageReach, type CredentialHostPolicy } from '../../policy/storage-reach.ts';
import type { ModelSources } from '../../sources/index.ts';
import { hasFinalizer, isBeingDeleted } from '../../runtime/index.ts';
import { layoutRefusal, type ModelServerDrivers } from '../../servers/driver.ts';
import { specProblem } from '../status.ts';
import { FINALIZER } from './cleanup.ts';

export type ServedModelPhase =
  /** The object is gone from the cache: what is kept for it is dropped. */
  | { kind: 'gone' }
  /** The cache holds a version our last write replaced: the pass waits for the watch to deliver that write. */
  | { kind: 'cacheBehind' }
  /** The spec does not parse: Stalled, naming the field. */
  | { kind: 'invalid'; message: string }
  /** Static endpoints outside the admin's --allowed-endpoint-hosts (no request at all), or a preheat store outside
   *  --allowed-storage-hosts (no Secret read, no listing, no location handed to an agent), or a source whose
   *  credentials would go where the admin's lists do not allow (its Secret not read: src/sources). */
  | {
      kind: 'refused';
      message: string;
      reason: 'EndpointNotAllowed' | CredentialReachReason;
    }
  /** spec.modelServer.driver names no driver the operator has: nothing can be asked of the replicas. */
  | { kind: 'unknownDriver'; message: string }
  /** Being deleted: unregister everywhere, then let the finalizer go. */
  | { kind: 'deleting'; spec: ServedModelSpec }
  /** A model the driver cannot load (a directory for TorchServe): said before any replica is asked. */
  | { kind: 'unsupportedLayout'; message: string }
  /** Our finalizer is not on the object yet. */
  | { kind: 'finalizing'; spec: ServedModelSpec }
  /** A source (spec.source) not resolved for this pass yet: before the gates, whose owned preheat is of the
   *  resolved digest. */
  | { kind: 'resolving'; spec: ServedModelSpec }
  /** The preheat gate of each replica is not known yet. */
  | { kind: 'gating'; spec: ServedModelSpec }
  /** A directory (spec.files) whose files this pass has not listed (or looked up) yet. */
  | { kind: 'listing'; spec: ServedModelSpec }
  /** Every replica one step closer. */
  | { kind: 'converging'; spec: ServedModelSpec }
  /** Status from the object and what the pass saw; Ready transitions and Events. */
  | { kind: 'reporting'; spec: ServedModelSpec };

export interface PhaseInput {
  /** The object from the cache (then as the pass's finalizer patch left it); undefined once it is gone. */
  object: ServedModel | undefined;
  /** Whether the cache holds a version our last write replaced. */
  behind: boolean;
  /** Where the admin lets the operator send requests, and storage credentials. */
  policy: ReachPolicy & Pick<CredentialHostPolicy, 'storageHosts'>;
  /** Where a spec.source's credentials may go (each kind's own lists). */
  sources: Pick<ModelSources, 'reach'>;
  drivers: Pick<ModelServerDrivers, 'find' | 'names'>;
  /** The steps of this pass done so far (each runs at most once a pass). */
  done: { finalizing: boolean; resolving: boolean; gating: boolean; listing: boolean; converging: boolean };
}

export function servedModelPhase(p: PhaseInput): ServedModelPhase {
  const sm = p.object;
  if (!sm) return { kind: 'gone' };
  if (p.behind) return { kind: 'cacheBehind' };
  const parsed = ServedModelSpec.safeParse(sm.spec);
  if (!parsed.success) return { kind: 'invalid', message: specProblem(parsed.error) };
  const spec = parsed.data;
  const reach = endpointsReach(staticAddresses(spec), 'spec.modelServer.endpoints', p.policy);
  if (!reach.allowed) return { kind: 'refused', message: reach.message, reason: 'EndpointNotAllowed' };
  const storage = spec.preheat?.objectStorage;
  const store = storage && storageReach(storage, 'spec.preheat.objectStorage', p.policy);
  // Deleting needs no storage credentials: a store outside the list still lets the model be unregistered.
  if (store && !store.allowed && !isBeingDeleted(sm))
    return { kind: 'refused', message: store.message, reason: 'StorageEndpointNotAllowed' };
  // Deleting reads no source credentials either: a refused source still lets the model be unregistered.
  const source = spec.source && p.sources.reach(spec.source);
  if (source && !source.allowed && !isBeingDeleted(sm))
    return { kind: 'refused', message: source.message, reason: source.reason };
  const driver = p.drivers.find(spec.modelServer.driver);
  if (!driver)
    return {
      kind: 'unknownDriver',
      message:
        `spec.modelServer.driver: the operator has no model-server driver named ${spec.modelServer.driver}; ` +
        `use one of ${p.drivers.names().join(', ')}`,
    };
  if (isBeingDeleted(sm)) return { kind: 'deleting', spec };
  // The API refuses Staged for the shipped drivers that cannot stage (their rows); this holds any driver to it.
  if (spec.rollout.strategy === 'Staged' && driver.stages !== true)
    return {
      kind: 'invalid',
      message: `spec.rollout.strategy: the ${driver.name} model server cannot hold a version without serving it (Staged): set spec.rollout.strategy to Rolling`,
    };
  // Likewise a canary's probe, which a driver without it could only fail (rolling every new version back).
  if (spec.rollout.canary?.probe && driver.probes !== true)
    return {
      kind: 'invalid',
      message: `spec.rollout.canary.probe: the ${driver.name} driver sends no inference probe: remove probe (the canary is then checked by the server's version-ready answer)`,
    };
  const refused = layoutRefusal(driver, spec.fileName === undefined ? 'directory' : 'archive');
  if (refused) return { kind: 'unsupportedLayout', message: refused };
  if (!p.done.finalizing && !hasFinalizer(sm, FINALIZER)) return { kind: 'finalizing', spec };
  // A source's owned preheat warms what it resolved to (a digest's blobs, a commit's files): resolved first.
  if (spec.source && !p.done.resolving) return { kind: 'resolving', spec };
  if (!p.done.gating) return { kind: 'gating', spec };
  if (spec.files && !p.done.listing) return { kind: 'listing', spec };
  if (!p.done.converging) return { kind: 'converging', spec };
  return { kind: 'reporting', spec };
}
