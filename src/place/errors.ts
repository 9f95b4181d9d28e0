/**
 * What can go wrong placing a version, as one typed error: a reason word (what the agent reports in its progress,
 * what a ServedModel's replica condition and `peerload fetch`'s exit line carry), the file or layer it concerns when
 * there is one, and a message that says what to fix. The words are the agent's API: controllers map them
 * (src/servers/agent-client.ts), so a word here is never renamed.
 */
import type { ReachReason } from '../policy/reach.ts';
import { redact } from '../redact.ts';

export const PlaceReason = {
  /** Files give object keys, and the placer has no credentials to sign them. */
  NoCredentials: 'NoCredentials',
  /** The version's known sizes, or the bytes received, pass the byte cap. */
  DiskBudgetExceeded: 'DiskBudgetExceeded',
  /** The known sizes do not fit in the volume's free space (less what must stay free). */
  InsufficientStorage: 'InsufficientStorage',
  /** The version was not complete within its deadline. */
  DeadlineExceeded: 'DeadlineExceeded',
  /** The placement was cancelled (a DELETE, a newer spec). */
  Cancelled: 'Cancelled',
  /** A file could not be fetched through the peer proxy. */
  DownloadFailed: 'DownloadFailed',
  /** A file could not be written, or the version not renamed into place. */
  WriteFailed: 'WriteFailed',
  /** A file's bytes do not hash to the sha256 its source publishes. */
  ChecksumMismatch: 'ChecksumMismatch',
  /** A tar entry would land outside the directory, or is a device, or a link leaving it. */
  UnsafeTarEntry: 'UnsafeTarEntry',
  /** An archive is not a readable tar (or not the compression it is said to have). */
  InvalidArchive: 'InvalidArchive',
  /** What the archives unpack to passes a byte or file-count cap. */
  LimitExceeded: 'LimitExceeded',
} as const;
export type PlaceReason = (typeof PlaceReason)[keyof typeof PlaceReason];

export class PlaceError extends Error {
  /** The placer's reason, or a reach rule's (a storage host outside --allowed-storage-hosts). */
  readonly reason: PlaceReason | ReachReason;
  /** How the file or layer is named in the message, when the error is about one. */
  readonly layer: string | undefined;
  constructor(reason: PlaceReason | ReachReason, message: string, opts: { layer?: string | undefined } = {}) {
    super(redact(message));
    this.name = 'PlaceError';
    this.reason = reason;
    this.layer = opts.layer;
  }
}

/** A version that cannot be placed at all (before a byte is written): `status` is the agent's HTTP answer. */
export class DownloadRefused extends PlaceError {
  readonly status: number;
  constructor(status: number, reason: PlaceReason | ReachReason, message: string) {
    super(reason, message);
    this.name = 'DownloadRefused';
    this.status = status;
  }
}
