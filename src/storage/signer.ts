/**
 * What every kind's signer (s3.ts, gcs.ts, oss.ts, abs.ts) receives. Its own module so that sign.ts, which picks
 * the signer, and the signers do not import each other.
 */
export interface SignRequest {
  now: Date;
  expiresSeconds: number;
}
