/**
 * A TorchServe model that says which version answered (each archive's handler answers `{"model", "version"}`), and
 * a client that sends it predictions on every replica: what the Staged rollout tests and benchmark see from the
 * client's side.
 */

/** The answer as a Python literal: a JSON object of strings is one. */
const answerOf = (model: string, version: string, fields: Record<string, string>): string =>
  JSON.stringify({ model, version, ...fields });

/**
 * The handler of `model` version `version`: answers `{"model", "version"}` and `fields` to every request (e.g. a
 * label a canary's probe checks, which a wrong version changes); when the replica's PEERLOAD_E2E_BROKEN names
 * `<model>-<version>`, its initialize raises (a worker that cannot load the model).
 */
export const versionedHandler = (model: string, version: string, fields: Record<string, string> = {}) => `
import json
import os


class Versioned:
    def __init__(self):
        self.initialized = False

    def initialize(self, context):
        if os.environ.get("PEERLOAD_E2E_BROKEN") == "${model}-${version}":
            raise RuntimeError("${model} ${version} cannot load on this replica")
        self.initialized = True


_service = Versioned()


def handle(data, context):
    if not _service.initialized:
        _service.initialize(context)
    if data is None:
        return None
    return [${answerOf(model, version, fields)} for _ in data]
`;

interface Answer {
  replica: number;
  sent: number;
  received: number;
  status: number;
  version?: string;
  error?: string;
}

/** A client per replica sending a prediction every `everyMs` until stop(): what answered each, and when. */
export function predictions(replicas: readonly { inferenceURL: string }[], model: string, everyMs = 25) {
  const answers: Answer[] = [];
  let running = true;
  const loops = replicas.map(async (ts, replica) => {
    while (running) {
      const sent = performance.now();
      try {
        const res = await fetch(`${ts.inferenceURL}/predictions/${model}`, {
          method: 'POST',
          body: 'x',
          signal: AbortSignal.timeout(30_000),
        });
        const text = await res.text();
        const a: Answer = { replica, sent, received: performance.now(), status: res.status };
        if (res.status === 200) a.version = (JSON.parse(text) as { version: string }).version;
        else a.error = text.slice(0, 300);
        answers.push(a);
      } catch (err) {
        answers.push({ replica, sent, received: performance.now(), status: 0, error: String(err) });
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  });
  return {
    answers,
    async stop() {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

/** ms during which the client met both versions: from the first v2 request sent to the last v1 answer received. */
export function mixedWindow(answers: Answer[], from: string, to: string): number {
  const firstNew = Math.min(...answers.filter((a) => a.version === to).map((a) => a.sent));
  const lastOld = Math.max(...answers.filter((a) => a.version === from).map((a) => a.received));
  return Math.max(0, Math.round(lastOld - firstNew));
}
