/**
 * A canary's check (`spec.rollout.canary`), the same for every server: the version is ready on the replica (its
 * own answer, observed by staged.ts) and, with `probe`, one inference request sent to that version through the
 * driver ({@link ReplicaServer.probe}) whose answer must have the expected status and fields. The matcher is
 * declarative (`{path, equals}` on the JSON answer) and what it reports is bounded: a probe's answer comes from an
 * address the tenant chose, so only the values at the paths the spec names are quoted, each cut short.
 */
import type { CanaryProbe } from '../../api/index.ts';
import type { Failure, InferenceAnswer, ReplicaServer } from '../../servers/driver.ts';
import { redactBounded } from '../../redact.ts';

/** The largest probe answer read: an inference answer to a small test input, with room to spare. */
export const MAX_PROBE_ANSWER_BYTES = 256 * 1024;
/** How long one probe may take, connection and whole answer. */
export const PROBE_TIMEOUT_MS = 10_000;
/** The most of one quoted value a message keeps. */
const MAX_QUOTED = 64;

/** The value at `path` (keys and indices joined by dots), or undefined when the answer has none there. */
export function valueAt(json: unknown, path: string): unknown {
  let at: unknown = json;
  for (const key of path.split('.')) {
    if (Array.isArray(at)) {
      if (!/^\d+$/.test(key)) return undefined;
      at = at[Number(key)];
    } else if (at !== null && typeof at === 'object' && Object.hasOwn(at, key)) {
      at = (at as Record<string, unknown>)[key];
    } else return undefined;
  }
  return at;
}

/** A value as the spec's `equals` writes it: a string as it is, anything else as its JSON. */
const asText = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v));

const quote = (text: string): string => JSON.stringify(redactBounded(text, MAX_QUOTED, []));

/** Why `answer` does not pass `expect`, or undefined when it does. */
export function mismatch(answer: InferenceAnswer, expect: CanaryProbe['expect']): string | undefined {
  if (answer.status !== expect.status) return `got HTTP ${answer.status}, expected ${expect.status}`;
  for (const f of expect.fields ?? []) {
    if (answer.json === undefined)
      return `got an answer that is not JSON, expected ${f.path} = ${quote(f.equals)}`;
    const v = valueAt(answer.json, f.path);
    if (v === undefined) return `got no ${f.path} in the answer, expected ${quote(f.equals)}`;
    const got = asText(v);
    if (got !== f.equals) return `got ${f.path} = ${quote(got)}, expected ${quote(f.equals)}`;
  }
  return undefined;
}

export interface ProbeTarget {
  server: ReplicaServer;
  model: string;
  version: string;
  signal: AbortSignal;
  failure: (err: unknown) => Failure | undefined;
}

/** Sends the probe and matches its answer: undefined when it passed, else what it got against what was expected. */
export async function probeOnce(t: ProbeTarget, probe: CanaryProbe): Promise<string | undefined> {
  if (!t.server.probe) return 'the driver sends no inference probe (spec.rollout.canary.probe)';
  let answer: InferenceAnswer;
  try {
    answer = await t.server.probe(
      t.model,
      t.version,
      { body: probe.body, port: probe.port, maxBytes: MAX_PROBE_ANSWER_BYTES },
      { signal: t.signal, timeoutMs: PROBE_TIMEOUT_MS },
    );
  } catch (err) {
    if (t.signal.aborted) throw err;
    const f = t.failure(err);
    return `no answer: ${f?.message ?? (err instanceof Error ? err.message : String(err))}`;
  }
  return mismatch(answer, probe.expect);
}
