/**
 * `peerload preheat`: creates a ModelPreheat from the command line (a CI step before a rollout), and with
 * `--wait` waits for it as `peerload wait` does.
 */
import { dump } from 'js-yaml';
import { API_VERSION, ModelPreheatSpec, OBJECT_STORAGE_TYPES, PREHEAT_SCOPES, GVR } from '../api/index.ts';
import { ApiError, type KubeObject } from '../runtime/kube.ts';
import { OBJECT_STORAGE_FLAGS, parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { durationFlag, kubeClientFor, waitForResource, type WaitIO } from './wait.ts';

export const PREHEAT_USAGE = `Usage: peerload preheat (--url URL... | --object-storage TYPE --bucket B --key KEY...) [options]

Creates a ModelPreheat (the operator runs the preheat job on the P2P manager).
  --url                URL to preheat; repeat for several
  --object-storage     s3, oss, gcs or abs: preheat objects of a bucket, signed by the operator
    --bucket           bucket (s3, oss, gcs)        --container     blob container (abs)
    --account-name     storage account (abs)        --region        region (s3; default us-east-1)
    --endpoint         service endpoint (oss; S3-compatible stores)
    --credentials-secret  Secret with the credentials, in the same namespace
    --key              object key; repeat for several
  --scope              single_seed_peer, all_seed_peers or all_peers (default single_seed_peer)
  --name               name of the ModelPreheat (default: generated, preheat-xxxxx)
  -n, --namespace      namespace (default default)
  --dry-run            print the ModelPreheat instead of creating it
  --wait               wait until it is Ready (exit 0) or Stalled (exit 1), as 'peerload wait'
  --timeout            with --wait: how long (default 10m)
  --interval           with --wait: how often to look (default 2s)
  --kubeconfig         kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)
Exit status: 0 created (with --wait: Ready), 1 Stalled, 2 bad input, refused or time-out.`;

const PREHEAT_FLAGS = {
  url: { type: 'string', multiple: true },
  ...OBJECT_STORAGE_FLAGS,
  'credentials-secret': { type: 'string' },
  key: { type: 'string', multiple: true },
  scope: { type: 'string', default: 'single_seed_peer' },
  name: { type: 'string' },
  namespace: { type: 'string', short: 'n', default: 'default' },
  'dry-run': { type: 'boolean' },
  wait: { type: 'boolean' },
  timeout: { type: 'string', default: '10m' },
  interval: { type: 'string', default: '2s' },
  kubeconfig: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type PreheatValues = ReturnType<typeof parsePreheatArgs>;

function parsePreheatArgs(argv: string[]) {
  return parseCommandArgs(argv, PREHEAT_FLAGS, false, PREHEAT_USAGE).values;
}

export async function run(
  argv: string[],
  io: WaitIO = { out: console.log, err: console.error },
): Promise<number> {
  const values = parsePreheatArgs(argv);
  if (values.help) {
    io.out(PREHEAT_USAGE);
    return 0;
  }
  const spec = preheatSpec(values);
  const timeoutMs = durationFlag('timeout', values.timeout);
  const intervalMs = durationFlag('interval', values.interval);
  const obj = {
    apiVersion: API_VERSION,
    kind: 'ModelPreheat',
    metadata: {
      ...(values.name ? { name: values.name } : { generateName: 'preheat-' }),
      namespace: values.namespace,
      labels: { 'app.kubernetes.io/created-by': 'peerload-cli' },
    },
    spec,
  };
  if (values['dry-run']) {
    io.out(dump(obj, { lineWidth: 120 }).trimEnd());
    return 0;
  }
  const kube = await kubeClientFor(values.kubeconfig);
  let created: KubeObject;
  try {
    created = await kube.resource<KubeObject>(GVR.modelPreheats).create(obj as unknown as KubeObject);
  } catch (err) {
    if (err instanceof ApiError) throw new CliError(`cannot create the ModelPreheat: ${err.message}`);
    throw err;
  }
  const name = created.metadata.name;
  io.out(`modelpreheat.peerload.io/${name} created in namespace ${values.namespace}`);
  if (!values.wait) return 0;
  return waitForResource(kube, GVR.modelPreheats, values.namespace, name, { timeoutMs, intervalMs, io });
}

/** The ModelPreheat's spec the flags describe, validated with the flag named in the message. */
function preheatSpec(values: PreheatValues): Record<string, unknown> {
  const urls = values.url ?? [];
  const storage = values['object-storage'];
  if (urls.length > 0 === (storage !== undefined))
    throw new CliError(`give either --url or --object-storage\n\n${PREHEAT_USAGE}`);
  if (storage !== undefined && !(OBJECT_STORAGE_TYPES as readonly string[]).includes(storage))
    throw new CliError(
      `--object-storage: must be one of ${OBJECT_STORAGE_TYPES.join(', ')}, got "${storage}"`,
    );
  if (!(PREHEAT_SCOPES as readonly string[]).includes(values.scope))
    throw new CliError(`--scope: must be one of ${PREHEAT_SCOPES.join(', ')}, got "${values.scope}"`);
  if (storage !== undefined && !values.key?.length)
    throw new CliError('--object-storage needs at least one --key');

  const spec: Record<string, unknown> = { scope: values.scope };
  if (urls.length === 1) spec.url = urls[0];
  if (urls.length > 1) spec.urls = urls;
  if (storage !== undefined)
    spec.objectStorage = JSON.parse(
      JSON.stringify({
        type: storage,
        bucket: values.bucket,
        container: values.container,
        accountName: values['account-name'],
        region: values.region,
        endpoint: values.endpoint,
        credentialsSecretRef: values['credentials-secret']
          ? { name: values['credentials-secret'] }
          : undefined,
        keys: values.key,
      }),
    );
  // The CRD validates too, but here the message can name the flag.
  const parsed = ModelPreheatSpec.safeParse(spec);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new CliError(`${flagOf(issue.path.map(String))}: ${issue.message}`);
  }
  return spec;
}

/** The flag behind a spec path, for error messages. */
function flagOf(path: string[]): string {
  const [top, field] = path;
  if (top === 'url' || top === 'urls') return '--url';
  if (top !== 'objectStorage') return `--${top ?? 'url'}`;
  const flags: Record<string, string> = {
    keys: '--key',
    accountName: '--account-name',
    credentialsSecretRef: '--credentials-secret',
    type: '--object-storage',
  };
  return flags[field ?? ''] ?? `--${field ?? 'object-storage'}`;
}
