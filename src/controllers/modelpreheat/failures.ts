/**
 * Every way a ModelPreheat reconcile can fail, mapped ONCE to what the user sees (condition reason and message)
 * and to what the controller does next (retry with backoff, retry after a given delay, or wait for a change).
 */
import { MANAGER_ADDRESS_REFUSED, ManagerError } from '../../manager/errors.ts';
import { CredentialsError } from '../../storage/credentials.ts';
import { FileSetError } from '../../storage/fileset.ts';
import { ListError } from '../../storage/list.ts';
import type { ReachReason } from '../../policy/reach.ts';
import { ManagerNotConfiguredError, ReachDeniedError } from '../managers.ts';
import { SecretNotFoundError } from '../secrets.ts';
import type { SourceReason } from '../../sources/index.ts';
import { SourceJobError } from './source.ts';

/** The condition reasons of a failed reconcile step (PreheatReason has the controller's own). */
export type FailureReason =
  | 'ManagerNotConfigured'
  | 'SecretNotFound'
  | 'InvalidCredentials'
  | 'ManagerAuthFailed'
  | 'SchedulerClusterNotFound'
  | 'ManagerNotFound'
  | 'InvalidJobArgs'
  | 'ManagerRefusedAddress'
  | 'ManagerRateLimited'
  | 'ManagerUnavailable'
  | 'ReconcileError'
  | DirectoryReason
  | SourceReason
  | ReachReason;

/** Why a directory (spec.objectStorage.prefix) cannot be preheated as listed. */
export type DirectoryReason =
  /** Nothing under the prefix matches include/exclude. */
  | 'NoFilesListed'
  /** More files or bytes than maxFiles / maxBytes. */
  | 'DirectoryTooLarge'
  /** A key that cannot be a file of a directory (a `..` segment), or a path listed twice. */
  | 'InvalidDirectory'
  /** The list API failed (credentials, bucket, network). */
  | 'ListFailed'
  /** The listing passed a size bound (a page's bytes, pages, keys): the store, or what answers as it, sends too much. */
  | 'ListingTooLarge'
  /** The listing passed a time bound: the endpoint did not answer, or not in time. */
  | 'ListingTimedOut'
  /** A listing made again in the same generation differs from the first one. */
  | 'DirectoryChanged';

/** When a listing that timed out is tried again. */
export const LISTING_TIMED_OUT_RETRY_MS = 10 * 60_000;

/** A listing made again for a generation (the operator restarted) found other content than the first one. */
export class DirectoryChangedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DirectoryChangedError';
  }
}

function directoryFailure(err: FileSetError | ListError | DirectoryChangedError): FailureView {
  if (err instanceof ListError && err.failure === 'tooLarge')
    // Final for the generation: the same endpoint and prefix will send as much again.
    return {
      reason: 'ListingTooLarge',
      message: `spec.objectStorage.prefix: ${err.message} (the prefix is listed again when the spec changes)`,
      retry: { kind: 'none' },
      final: true,
    };
  if (err instanceof ListError && err.failure === 'timedOut')
    // Blocked, and tried again only after a long while: a listing that timed out held a worker for minutes, and
    // an endpoint that never answers must not hold one again and again.
    return {
      reason: 'ListingTimedOut',
      message: `spec.objectStorage.endpoint: ${err.message} (listed again in ${LISTING_TIMED_OUT_RETRY_MS / 60_000} minutes, or when the spec changes)`,
      retry: { kind: 'after', ms: LISTING_TIMED_OUT_RETRY_MS },
      final: false,
      blocked: true,
    };
  if (err instanceof ListError)
    // Blocked, retried with backoff: a network error passes by itself, a refused key needs a fixed Secret.
    return {
      reason: 'ListFailed',
      message: err.message,
      retry: { kind: 'backoff' },
      final: false,
      blocked: true,
    };
  if (err instanceof DirectoryChangedError)
    return { reason: 'DirectoryChanged', message: err.message, retry: { kind: 'none' }, final: true };
  // Final for the generation: the prefix is listed once per generation, so only a spec edit lists it again.
  const reason: DirectoryReason =
    err.field === 'include' || err.field === 'files'
      ? 'NoFilesListed'
      : err.field === 'maxFiles' || err.field === 'maxBytes'
        ? 'DirectoryTooLarge'
        : 'InvalidDirectory';
  const field =
    reason === 'NoFilesListed'
      ? 'spec.objectStorage.prefix/include/exclude'
      : `spec.objectStorage.${err.field}`;
  return {
    reason,
    message: `${field}: ${err.message} (the prefix is listed again when the spec changes)`,
    retry: { kind: 'none' },
    final: true,
  };
}

/** How often a resource refused by the reach policy looks again (a ClusterManager may be created meanwhile). */
const REACH_RECHECK_MS = 60_000;

export interface FailureView {
  reason: FailureReason;
  message: string;
  /** `backoff`: throw so the queue retries with per-key exponential backoff; `after`: requeue after ms;
   *  `none`: nothing will change until the spec, a Secret or the operator's flags do. */
  retry:
    | { kind: 'backoff' }
    /** `fromServer`: the manager's Retry-After, which the reconcile bounds to its poll interval range. */
    | { kind: 'after'; ms: number; fromServer?: boolean }
    | { kind: 'none' };
  /** Whether the condition is final (`False`) or still open (`Unknown`). */
  final: boolean;
  /** Open, but only a change (a Secret, credentials) can make it succeed: the resource is Stalled. */
  blocked?: true;
  /** Part of normal operation, not a failure: no Warning Event (the manager's job rate limit). */
  quiet?: true;
}

/**
 * When a job creation the manager rate-limited (429, no Retry-After: the real manager sends none) is tried again:
 * its limit is per second (10 creations/s per scheduler cluster by default), so within a second or two, spread by
 * the reconciler so that a burst of preheats does not come back at once.
 */
export const RATE_LIMITED_RETRY_MS = 1_000;

/**
 * A Hub source the Hub refuses as it stands (a token, a repository, a revision, the selection) waits for a change of
 * the spec, the Secret or the refresh annotation; a Hub that does not answer (or not in time) is tried again with
 * backoff, Stalled meanwhile.
 */
function sourceFailure(err: SourceJobError): FailureView {
  const { reason, message, final } = err.failure;
  return final
    ? { reason, message, retry: { kind: 'none' }, final: true }
    : { reason, message, retry: { kind: 'backoff' }, final: false, blocked: true };
}

export function describeFailure(err: unknown, action: string): FailureView {
  if (err instanceof SourceJobError) return sourceFailure(err);
  if (err instanceof FileSetError || err instanceof ListError || err instanceof DirectoryChangedError)
    return directoryFailure(err);
  if (err instanceof ManagerNotConfiguredError) {
    return { reason: 'ManagerNotConfigured', message: err.message, retry: { kind: 'none' }, final: true };
  }
  if (err instanceof ReachDeniedError) {
    // Blocked, not final: an admin may create the ClusterManager or allow the host without the spec changing.
    return {
      reason: err.reason,
      message: err.message,
      retry: { kind: 'after', ms: REACH_RECHECK_MS },
      final: false,
      blocked: true,
    };
  }
  if (err instanceof SecretNotFoundError) {
    return {
      reason: 'SecretNotFound',
      message: err.message,
      retry: { kind: 'backoff' },
      final: false,
      blocked: true,
    };
  }
  if (err instanceof CredentialsError) {
    return {
      reason: 'InvalidCredentials',
      message: err.message,
      retry: { kind: 'backoff' },
      final: false,
      blocked: true,
    };
  }
  if (err instanceof ManagerError) return managerFailure(err, `${action}: ${err.message}`);
  return {
    reason: 'ReconcileError',
    message: `${action}: ${(err as Error)?.message ?? String(err)}`,
    retry: { kind: 'backoff' },
    final: false,
  };
}

/** How a manager's answer reads: its kind decides the reason and whether (and when) the step is tried again. */
function managerFailure(err: ManagerError, text: string): FailureView {
  const after = (fallback: FailureView['retry']): FailureView['retry'] =>
    err.retryAfterMs !== undefined ? { kind: 'after', ms: err.retryAfterMs, fromServer: true } : fallback;
  switch (err.kind) {
    case 'auth':
      return {
        reason: 'ManagerAuthFailed',
        message: `${text} (check the manager token or user Secret)`,
        retry: { kind: 'backoff' },
        final: false,
        blocked: true,
      };
    case 'notFound':
      return {
        reason: /scheduler cluster/i.test(err.message) ? 'SchedulerClusterNotFound' : 'ManagerNotFound',
        message: text,
        retry: { kind: 'none' },
        final: true,
      };
    case 'terminal':
      if (err.status >= 500 && MANAGER_ADDRESS_REFUSED.test(err.managerMessage))
        return {
          reason: 'ManagerRefusedAddress',
          message: `spec.url: the manager refuses to dial its host (${err.managerMessage}); its image preheat reaches only global unicast addresses, not loopback or link-local ones: name the registry at an address the manager can dial, or preheat its blob URLs with type: file`,
          retry: { kind: 'none' },
          final: true,
        };
      return { reason: 'InvalidJobArgs', message: text, retry: { kind: 'none' }, final: true };
    case 'retryable':
    case 'conflict':
      if (err.status === 429)
        return {
          reason: 'ManagerRateLimited',
          message: `${text} (the manager's job rate limit: waiting for its turn)`,
          retry: after({ kind: 'after', ms: RATE_LIMITED_RETRY_MS }),
          final: false,
          quiet: true,
        };
      return { reason: 'ManagerUnavailable', message: text, retry: after({ kind: 'backoff' }), final: false };
  }
}
