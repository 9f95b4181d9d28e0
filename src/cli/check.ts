/** `peerload check`: the command line of src/check/consistency.ts. */
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { kubeClientFor } from './wait.ts';
import { API_VERSION, GVR } from '../api/index.ts';
import { ApiError, type KubeObject } from '../runtime/kube.ts';
import {
  CheckInputError,
  checkDocuments,
  parsePluginConfig,
  pluginSide,
  readManifests,
  readText,
  type CheckResult,
  type Documents,
  type PluginSide,
} from '../check/consistency.ts';
import { agentAsDownloadSide, checkAgentSpec } from '../check/agent-side.ts';
import { ModelVersionSpecSchema, specProblems, type ModelVersionSpec } from '../place/spec.ts';
import { redact } from '../redact.ts';
import { DAEMON_VERSION_HINT, DEFAULT_TASK_ID_RULE, taskIdRule } from '../storage/taskid.ts';

const USAGE = `Usage: peerload check --plugin-config <config.json> [--json] (<manifest.yaml>... | - | --from-cluster)
       peerload check --agent-spec <version.json> [--daemon-version V] [--json] (<manifest.yaml>... | - | --from-cluster)

For each URL a ModelPreheat would warm and each download the plugin would make (ServedModel fileName, or the
preheated keys), says whether both have the same P2P task id, and why not when they do not.
--plugin-config   the endpoint plugin's configuration file (JSON: addr, header, filter, object_storage,
                  daemon_version: the peer daemon's version, whose task id rule is used; default 1.4)
--agent-spec      instead of the plugin: a model directory the agent downloads (the body of its PUT
                  /v1/models/{name}, also 'peerload fetch --spec'); each file is checked against the preheats
--daemon-version  with --agent-spec: the peer daemon's version (default ${DEFAULT_TASK_ID_RULE})
--json            machine-readable output (default: one line per download)
--from-cluster    check the ModelPreheats and ServedModels of the cluster (with or without manifests)
-n, --namespace   with --from-cluster: one namespace (default: all namespaces)
--kubeconfig      with --from-cluster: kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)
Manifests hold ModelPreheat and/or ServedModel documents, or Lists of them (kubectl get -o yaml); other kinds are
ignored. '-' reads them from stdin, e.g. kubectl get mph,sm -A -o yaml | peerload check --plugin-config c.json -
Warnings say when the configuration would make downloads bypass P2P altogether.
Exit status: 0 all share a task id, 1 at least one does not, 2 bad input.`;

export interface CheckIO {
  out: (line: string) => void;
  err: (line: string) => void;
}

const defaultIO: CheckIO = {
  out: (line) => console.log(line),
  err: (line) => console.error(line),
};

/** The cluster's ModelPreheats and ServedModels as one List document. */
async function fromCluster(namespace: string | undefined, kubeconfig: string | undefined) {
  const kube = await kubeClientFor(kubeconfig);
  const items: unknown[] = [];
  for (const gvr of [GVR.modelPreheats, GVR.servedModels]) {
    try {
      const list = await kube.resource<KubeObject>(gvr).list(namespace);
      // List items carry no apiVersion/kind.
      for (const o of list.items) items.push({ ...o, apiVersion: API_VERSION, kind: gvr.kind });
    } catch (err) {
      if (err instanceof ApiError)
        throw new CliError(`--from-cluster: cannot list ${gvr.resource}: ${err.message}`);
      throw err;
    }
  }
  const where = namespace ? `namespace ${namespace}` : 'all namespaces';
  return { name: `cluster (${where})`, text: JSON.stringify({ kind: 'List', items }) };
}

/** An agent version spec; errors name the file and the fields, never a value. */
async function readAgentSpec(path: string): Promise<ModelVersionSpec> {
  let json: unknown;
  try {
    json = JSON.parse(await readText(path));
  } catch (e) {
    if (e instanceof CheckInputError) throw e;
    throw new CheckInputError(`${path}: not JSON`);
  }
  const parsed = ModelVersionSpecSchema.safeParse(json);
  if (!parsed.success) throw new CheckInputError(`${path}: ${redact(specProblems(parsed.error))}`);
  return parsed.data;
}

/** `peerload check`. Exit status: 0 all match, 1 a miss, 2 bad input. */
export async function run(argv: string[], io: CheckIO = defaultIO): Promise<number> {
  try {
    const { values, positionals } = parseCommandArgs(
      argv,
      {
        'plugin-config': { type: 'string' },
        'agent-spec': { type: 'string' },
        'daemon-version': { type: 'string', default: DEFAULT_TASK_ID_RULE },
        json: { type: 'boolean' },
        'from-cluster': { type: 'boolean' },
        namespace: { type: 'string', short: 'n' },
        kubeconfig: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      true,
      USAGE,
    );
    if (values.help) {
      io.out(USAGE);
      return 0;
    }
    if (values['plugin-config'] === undefined && values['agent-spec'] === undefined)
      throw new CliError(`--plugin-config is required (or --agent-spec)\n\n${USAGE}`);
    if (values['plugin-config'] !== undefined && values['agent-spec'] !== undefined)
      throw new CliError(`give --plugin-config or --agent-spec, not both\n\n${USAGE}`);
    if (positionals.length === 0 && !values['from-cluster'])
      throw new CliError(`expected at least one manifest, - (stdin) or --from-cluster\n\n${USAGE}`);
    let plugin: PluginSide;
    let check: (docs: Documents) => CheckResult[];
    const configPath = values['plugin-config'] ?? values['agent-spec']!;
    if (values['agent-spec'] !== undefined) {
      const rule = taskIdRule(values['daemon-version']);
      if (rule === undefined)
        throw new CliError(`--daemon-version ${DAEMON_VERSION_HINT}, got "${values['daemon-version']}"`);
      const spec = await readAgentSpec(configPath);
      plugin = agentAsDownloadSide(spec, rule);
      check = (docs) => checkAgentSpec(spec, rule, docs);
    } else {
      plugin = pluginSide(parsePluginConfig(await readText(configPath), configPath));
      check = (docs) => checkDocuments(plugin, docs);
    }
    const cluster = values['from-cluster'] ? [await fromCluster(values.namespace, values.kubeconfig)] : [];
    const docs = await readManifests(positionals, plugin, cluster);
    const results = check(docs);
    const ok = results.every((r) => r.status === 'OK');
    if (values.json) {
      io.out(JSON.stringify({ ok, results, notes: docs.notes, warnings: plugin.warnings }, null, 2));
    } else {
      for (const warning of plugin.warnings) io.err(`warning: ${configPath}: ${warning}`);
      for (const note of docs.notes) io.err(`note: ${note}`);
      for (const r of results) {
        if (r.status === 'OK') {
          io.out(`OK   ${r.label}  task ${r.taskID}`);
        } else {
          io.out(`MISS ${r.label}`);
          for (const reason of r.reasons) io.out(`     ${reason.message}`);
        }
      }
      const misses = results.filter((r) => r.status === 'MISS').length;
      io.err(`${results.length - misses} of ${results.length} downloads share the preheat's task id`);
    }
    return ok ? 0 : 1;
  } catch (err) {
    if (err instanceof CliError || err instanceof CheckInputError) {
      io.err(`peerload check: ${err.message}`);
      return 2;
    }
    throw err;
  }
}
