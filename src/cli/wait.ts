/**
 * `peerload wait (mph|sm)/NAME`: waits until a ModelPreheat or ServedModel is Ready (exit 0), stops as soon as
 * it is Stalled (exit 1, printing the reason), and exits 2 on bad input or time-out. One progress line on stderr
 * per change, for CI logs. Unlike `kubectl wait --for=condition=Ready`, a failure ends the wait at once.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseDuration, GVR } from '../api/index.ts';
import { ApiError, KubeClient, type Gvr, type KubeObject } from '../runtime/kube.ts';
import { loadKubeConfig } from '../runtime/kubeconfig.ts';
import { timerDelay } from '../runtime/timers.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { USER_AGENT } from '../version.ts';

export const WAIT_USAGE = `Usage: peerload wait (mph|sm)/NAME [-n NAMESPACE] [--timeout DURATION] [--kubeconfig FILE]

Waits until the ModelPreheat (mph) or ServedModel (sm) is Ready for its current generation.
  -n, --namespace   namespace of the resource (default default)
  --timeout         how long to wait, e.g. 90s, 10m (default 10m)
  --interval        how often to look (default 2s)
  --kubeconfig      kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)
Progress goes to stderr, one line per change. Exit status: 0 Ready, 1 Stalled (the reason is printed) or deleted,
2 bad input or time-out.`;

const KINDS: Record<string, Gvr> = {
  mph: GVR.modelPreheats,
  modelpreheat: GVR.modelPreheats,
  modelpreheats: GVR.modelPreheats,
  sm: GVR.servedModels,
  servedmodel: GVR.servedModels,
  servedmodels: GVR.servedModels,
};

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  observedGeneration?: number;
}
interface Watched extends KubeObject {
  status?: { observedGeneration?: number; conditions?: Condition[]; phase?: string; ready?: string };
}

export type Readiness =
  | { state: 'Ready'; line: string }
  | { state: 'Stalled'; line: string }
  | { state: 'InProgress'; line: string };

/** What the resource's status says, with the same rules as the Argo CD check and kstatus. */
export function readiness(obj: Watched): Readiness {
  const gen = obj.metadata.generation;
  const status = obj.status;
  if (!status?.conditions?.length)
    return { state: 'InProgress', line: 'waiting for the operator to report status' };
  if (gen !== undefined && status.observedGeneration !== gen)
    return { state: 'InProgress', line: `waiting for the operator to observe generation ${gen}` };
  const get = (type: string) => status.conditions!.find((c) => c.type === type);
  const text = (c: Condition) => `${c.reason ?? ''}${c.message ? `: ${c.message}` : ''}`;
  const extra = status.phase ? ` [${status.phase}]` : status.ready ? ` [${status.ready}]` : '';
  const stalled = get('Stalled');
  if (stalled?.status === 'True') return { state: 'Stalled', line: `Stalled: ${text(stalled)}${extra}` };
  const ready = get('Ready');
  if (ready?.status === 'True') return { state: 'Ready', line: `Ready: ${text(ready)}${extra}` };
  const reconciling = get('Reconciling');
  const why = reconciling?.status === 'True' ? reconciling : ready;
  return {
    state: 'InProgress',
    line: `${why ? `Reconciling: ${text(why)}` : 'waiting for the Ready condition'}${extra}`,
  };
}

export interface WaitIO {
  out: (line: string) => void;
  err: (line: string) => void;
}
const defaultIO: WaitIO = { out: (l) => console.log(l), err: (l) => console.error(l) };

/** Polls until Ready / Stalled / deleted / time-out. Returns the exit status. */
export async function waitForResource(
  kube: KubeClient,
  gvr: Gvr,
  namespace: string,
  name: string,
  opts: { timeoutMs: number; intervalMs: number; io: WaitIO; signal?: AbortSignal },
): Promise<number> {
  const what = `${gvr.kind}/${name}`;
  const deadline = Date.now() + opts.timeoutMs;
  const client = kube.resource<Watched>(gvr);
  let last = '';
  let seen = false;
  const say = (line: string) => {
    if (line !== last) opts.io.err(`${what}: ${line}`);
    last = line;
  };
  for (;;) {
    let obj: Watched | undefined;
    try {
      obj = await client.get(namespace, name, opts.signal);
      seen = true;
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.code === 404) {
        if (seen) {
          opts.io.err(`${what}: deleted while waiting`);
          return 1;
        }
        say(`not found in namespace ${namespace} yet`);
      } else if (err.code === 401 || err.code === 403) {
        throw new CliError(`cannot read ${what} in namespace ${namespace}: ${err.message}`);
      } else {
        say(`apiserver: ${err.message}`);
      }
    }
    if (obj) {
      const r = readiness(obj);
      say(r.line);
      if (r.state === 'Ready') {
        opts.io.out(`${what} is Ready`);
        return 0;
      }
      if (r.state === 'Stalled') {
        opts.io.out(`${what} is Stalled: ${r.line.replace(/^Stalled: /, '')}`);
        return 1;
      }
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      opts.io.err(`${what}: timed out after ${Math.round(opts.timeoutMs / 1000)}s (last: ${last})`);
      return 2;
    }
    await sleep(timerDelay(Math.min(opts.intervalMs, left)));
  }
}

/** Parses `--timeout` and `--interval`; a bad value is a CliError naming the flag. */
export function durationFlag(flag: string, value: string): number {
  try {
    const ms = parseDuration(value);
    if (ms > 0) return ms;
  } catch {
    // reported below
  }
  throw new CliError(`--${flag}: must be a positive duration such as 90s, 10m or 1h30m, got "${value}"`);
}

export async function kubeClientFor(kubeconfig: string | undefined): Promise<KubeClient> {
  try {
    // Writes from the command line are the user's, not the operator's: a field manager of their own.
    return new KubeClient(await loadKubeConfig(kubeconfig), {
      fieldManager: 'peerload-cli',
      userAgent: USER_AGENT,
    });
  } catch (err) {
    throw new CliError(`--kubeconfig: ${(err as Error).message}`);
  }
}

export async function run(argv: string[], io: WaitIO = defaultIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    argv,
    {
      namespace: { type: 'string', short: 'n', default: 'default' },
      timeout: { type: 'string', default: '10m' },
      interval: { type: 'string', default: '2s' },
      kubeconfig: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    true,
    WAIT_USAGE,
  );
  if (values.help) {
    io.out(WAIT_USAGE);
    return 0;
  }
  if (positionals.length !== 1)
    throw new CliError(`expected one resource, e.g. mph/my-preheat\n\n${WAIT_USAGE}`);
  const [kind = '', name = ''] = positionals[0]!.split('/');
  const gvr = KINDS[kind.replace(/\.peerload\.io$/, '').toLowerCase()];
  if (!gvr || !name)
    throw new CliError(
      `"${positionals[0]}" is not (mph|sm)/NAME: use mph/NAME for a ModelPreheat, sm/NAME for a ServedModel`,
    );
  const timeoutMs = durationFlag('timeout', values.timeout);
  const intervalMs = durationFlag('interval', values.interval);
  const kube = await kubeClientFor(values.kubeconfig);
  return waitForResource(kube, gvr, values.namespace, name, { timeoutMs, intervalMs, io });
}
