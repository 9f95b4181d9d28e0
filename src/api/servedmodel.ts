/**
 * ServedModel: a model registered, scaled and ready on EVERY replica of a model server, downloaded through the
 * node's peer by the server's endpoint plugin or the peerload agent beside it. What each server needs and takes is
 * the drivers' declarations (drivers.ts); the servers' APIs are src/servers/.
 */
import { z } from 'zod';
import {
  API_VERSION,
  Conditions,
  EndpointURL,
  ObjectMeta,
  ObjectName,
  SecretKeyRef,
  Timestamp,
  countSet,
  distinct,
  durationBetween,
  withRules,
} from './common.ts';
import { DirectoryPrefix, HAS_SELECTION_CEL, hasSelection, selectionFields } from './fileset.ts';
import { ManagerRef } from './manager.ts';
import { ObjectKey } from './objectkey.ts';
import { ObjectStorageLocation } from './objectstorage.ts';
import { CacheStatus, PREHEAT_SCOPES, PeerDaemonVersion } from './modelpreheat.ts';
import { ModelSource, SOURCE_MEMBERS, SourceStatus, type SourcePreheat } from './sources.ts';
import {
  DEFAULT_DRIVER,
  DRIVERS,
  DRIVER_NAMES,
  celDriver,
  celList,
  driversWhere,
  listed,
  type DriverDeclaration,
} from './drivers.ts';

/** The drivers that need the peerload agent, and those whose server has no per-model worker count. */
const AGENT_DRIVERS = driversWhere((d) => d.agent === 'required');
const FIXED_DRIVERS = driversWhere((d) => d.scaling === 'fixed');
const REGISTRATION_DRIVERS = driversWhere((d) => d.options.includes('registration'));
/** The drivers whose replicas can hold a version without serving it (rollout strategy Staged). */
const STAGING_DRIVERS = driversWhere((d) => d.staging === true);
const NO_STAGING_DRIVERS = driversWhere((d) => d.staging !== true);
const STAGED_REFUSALS = NO_STAGING_DRIVERS.map((n) => {
  const d: DriverDeclaration = DRIVERS[n];
  return `${n}: ${d.staging === true ? '' : d.staging.refused}`;
}).join('; ');
/** The drivers that send a canary's inference probe, those that need probe.port for it, and those that do not probe. */
const PROBE_DRIVERS = driversWhere((d) => !('refused' in d.probe));
const PROBE_PORT_DRIVERS = driversWhere((d) => !('refused' in d.probe) && d.probe.port === 'required');
const PROBE_NO_PORT_DRIVERS = driversWhere((d) => !('refused' in d.probe) && d.probe.port === 'unused');
const NO_PROBE_DRIVERS = driversWhere((d) => 'refused' in d.probe);
const PROBE_REFUSALS = NO_PROBE_DRIVERS.map((n) => {
  const d: DriverDeclaration = DRIVERS[n];
  return `${n}: ${'refused' in d.probe ? d.probe.refused : ''}`;
}).join('; ');
/** The drivers that load a directory the agent placed: what a spec.source becomes. */
const DIRECTORY_DRIVERS = driversWhere((d) => d.agent !== 'unused' && d.layouts.includes('directory'));
const NO_DIRECTORY_DRIVERS = driversWhere((d) => d.agent === 'unused' || !d.layouts.includes('directory'));
const SCALING_WORDS = (
  [
    ['workers', 'worker processes'],
    ['instances', 'instances set by a reload'],
    ['fixed', 'fixed at 1'],
  ] as const
)
  .map(([scaling, words]) => `${words} (${driversWhere((d) => d.scaling === scaling).join(', ')})`)
  .join(', ');
const has = (names: readonly string[], driver: string | undefined) =>
  names.includes(driver ?? DEFAULT_DRIVER);

/** How a change of version reaches the replicas (spec.rollout.strategy). */
export const ROLLOUT_STRATEGIES = ['Rolling', 'Staged'] as const;
/** How long a Staged rollout may go without progress before it is rolled back, unless the spec says. */
export const DEFAULT_PROGRESS_DEADLINE_SECONDS = 600;
/** The annotation whose new value retries a rolled-back rollout (status.rollout.retry holds the value tried). */
export const RETRY_ROLLOUT_ANNOTATION = 'peerload.io/retry-rollout';

/** How long a canary is probed before the others switch, unless the spec says. */
export const DEFAULT_CANARY_HOLD_SECONDS = 60;
/** How often a canary is probed during its hold. */
export const CANARY_PROBE_PERIOD_SECONDS = 5;

/** A JSON text (a probe's request body). */
const JsonText = z
  .string()
  .min(2)
  .max(16_384)
  .refine(
    (t) => {
      try {
        JSON.parse(t);
        return true;
      } catch {
        return false;
      }
    },
    { message: 'must be JSON text' },
  );

/** One field of a probe's expected answer. */
export const ExpectedField = z.object({
  path: z
    .string()
    .min(1)
    .max(256)
    .regex(
      /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/,
      'must be keys and indices joined by dots, e.g. outputs.0.data.0',
    )
    .meta({
      description:
        'Where in the JSON answer: object keys and array indices joined by dots (outputs.0.data.0; a number picks an array element).',
    }),
  equals: z.string().max(1024).meta({
    description:
      'The value expected there, as text: a string answer is compared as it is, any other value as its JSON (3, true, [1,2]).',
  }),
});

export const CanaryProbe = z.object({
  port: z
    .int()
    .min(1)
    .max(65535)
    .optional()
    .meta({
      description: `The server's inference port on each replica's address, for servers whose inference API is not on the management endpoint (${listed(PROBE_PORT_DRIVERS)}, where it is required: TorchServe's inference API, 8080 by default); the others (${listed(PROBE_NO_PORT_DRIVERS)}) answer inference on the endpoint itself.`,
    }),
  body: JsonText.meta({
    description:
      "The inference request's JSON body, as text, sent to the new version explicitly (the driver's request: api.md's drivers table), e.g. an Open Inference Protocol request or what a TorchServe handler reads.",
  }),
  expect: z
    .object({
      status: z
        .int()
        .min(100)
        .max(599)
        .default(200)
        .meta({ description: 'The HTTP status expected (default 200).' }),
      fields: z.array(ExpectedField).max(16).optional().meta({
        description: 'Fields of the JSON answer and their expected values; all must match.',
      }),
    })
    .default({ status: 200 })
    .meta({ description: 'What a passing answer is.' }),
});
export type CanaryProbe = z.infer<typeof CanaryProbe>;

export const Canary = withRules(
  z.object({
    replicas: z.int().min(1).max(1000).optional().meta({
      description: 'How many replicas switch first (at most all of them). Set this or percent.',
    }),
    percent: z.int().min(1).max(100).optional().meta({
      description:
        'The share of the replicas that switch first, rounded up (at least one). Set this or replicas.',
    }),
    holdSeconds: z
      .int()
      .min(0)
      .max(86_400)
      .default(DEFAULT_CANARY_HOLD_SECONDS)
      .meta({
        description: `How long every canary must pass its probe, probed every ${CANARY_PROBE_PERIOD_SECONDS}s, before the others switch (default ${DEFAULT_CANARY_HOLD_SECONDS}).`,
      }),
    probe: CanaryProbe.optional().meta({
      description: `A real inference request each canary must answer as expected (drivers: ${listed(PROBE_DRIVERS)}); without it the check is the server's own answer that the new version is ready.`,
    }),
  }),
  [
    {
      rule: '[has(self.replicas), has(self.percent)].filter(x, x).size() == 1',
      message: 'set exactly one of replicas and percent',
      fieldPath: '.replicas',
      reason: 'FieldValueInvalid',
      check: (c) => countSet(c.replicas, c.percent) === 1,
    },
  ],
);
export type Canary = z.infer<typeof Canary>;

export const AgentRef = z.object({
  port: z.int().min(1).max(65535).meta({ description: "The agent's port on each replica's address." }),
  scheme: z.enum(['http', 'https']).default('http').meta({ description: 'Scheme toward the agent.' }),
  tokenSecretRef: SecretKeyRef.meta({
    description:
      "The agent's token (what it reads from --token-file); `{pod}` in key stands for the pod name.",
  }),
  root: z
    .string()
    .max(1024)
    .regex(/^\/[^\0]*$/, 'must be an absolute path')
    .optional()
    .meta({
      description:
        "Where the model server's container mounts the agent's --root, for servers the driver tells a directory's path to load (rather than a repository they scan); default /models.",
    }),
});

export const ModelServer = withRules(
  z.object({
    service: z
      .object({
        name: ObjectName.meta({ description: 'Service in front of the model-server pods (same namespace).' }),
        port: z
          .union([
            z.int().min(1).max(65535),
            z
              .string()
              .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/)
              .max(15),
          ])
          .default('management')
          .meta({ description: 'Management port of the Service: its name or number. Default `management`.' }),
      })
      .optional()
      .meta({ description: 'Discover every ready replica from the EndpointSlices of this Service.' }),
    endpoints: distinct(z.array(EndpointURL).min(1).max(1000)).optional().meta({
      description:
        'Static management addresses (http(s)://host:port), for model servers outside the cluster.',
    }),
    scheme: z
      .enum(['http', 'https'])
      .default('http')
      .meta({ description: 'Scheme used with discovered endpoints.' }),
    pluginPath: z
      .string()
      .max(64)
      .regex(/^[A-Za-z0-9_-]+$/, 'must be one path segment')
      .default('p2p')
      .meta({
        description:
          'Path of the endpoint plugin: p2p (peerload plugin) or dragonfly (older third-party plugin).',
      }),
    managementTokenSecretRef: SecretKeyRef.optional().meta({
      description:
        'Model server token: the management key, or a key_file.json (then the API key is used to renew expired keys).',
    }),
    driver: z
      .string()
      .max(63)
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a driver name (lower-case letters, digits, -)')
      .default(DEFAULT_DRIVER)
      .meta({
        description: `Which model server the replicas run: ${DRIVER_NAMES.map((n) => `${n} (${DRIVERS[n].summary})`).join('; ')}. A name the operator has no driver for is Stalled (UnknownDriver).`,
      }),
    agent: AgentRef.optional().meta({
      description: `The peerload agent beside each replica, for drivers that load directories (${listed(driversWhere((d) => d.agent !== 'unused'))}): reached on the replica's address at this port.`,
    }),
  }),
  [
    {
      rule: `!(${celDriver('self.driver')} in ${celList(AGENT_DRIVERS)}) || has(self.agent)`,
      message: `the ${listed(AGENT_DRIVERS)} drivers load what the peerload agent placed: set agent (its port and token)`,
      fieldPath: '.agent',
      reason: 'FieldValueRequired',
      check: (m) => !has(AGENT_DRIVERS, m.driver) || m.agent !== undefined,
    },
    {
      rule: '[has(self.service), has(self.endpoints)].filter(x, x).size() == 1',
      message: 'set exactly one of service and endpoints',
      fieldPath: '.service',
      reason: 'FieldValueInvalid',
      check: (m) => countSet(m.service, m.endpoints) === 1,
    },
  ],
);
export type ModelServer = z.infer<typeof ModelServer>;

export const Workers = withRules(
  z.object({
    min: z.int().min(0).max(1024).default(1).meta({ description: 'min_worker on every replica.' }),
    max: z
      .int()
      .min(0)
      .max(1024)
      .optional()
      .meta({ description: 'max_worker on every replica (default: min).' }),
  }),
  [
    {
      rule: '!has(self.max) || self.max >= self.min',
      message: 'max must be greater than or equal to min',
      fieldPath: '.max',
      reason: 'FieldValueInvalid',
      check: (w) => w.max === undefined || w.max >= w.min,
    },
  ],
);

export const Registration = z.object({
  handler: z
    .string()
    .max(512)
    .optional()
    .meta({ description: 'Handler override (else the archive manifest).' }),
  runtime: z
    .enum(['python', 'python3', 'LSP'])
    .optional()
    .meta({ description: 'Runtime override (else the archive manifest).' }),
  batchSize: z.int().min(1).max(4096).optional().meta({ description: 'Inference batch size.' }),
  maxBatchDelay: z.int().min(0).max(600000).optional().meta({ description: 'Milliseconds.' }),
  responseTimeout: z.int().min(1).max(86400).optional().meta({ description: 'Seconds.' }),
  startupTimeout: z.int().min(1).max(86400).optional().meta({ description: 'Seconds (TorchServe 0.12+).' }),
});

/**
 * A model that is a directory (ServedModel spec.files): a prefix in the bucket of preheat.objectStorage, listed
 * by the operator (with include/exclude and caps), or the files named one by one. Placed beside the model server
 * by its `peerload agent`, for drivers that load directories.
 */
export const ModelDirectory = withRules(
  z.object({
    prefix: DirectoryPrefix.meta({
      description:
        "The model's directory in the bucket of preheat.objectStorage, e.g. models/llama-3-8b/ ('' is the bucket root). A file's path under it is where the file lands in the model's directory.",
    }),
    keys: distinct(z.array(ObjectKey).min(1).max(100)).optional().meta({
      description:
        'The files, relative to prefix, instead of a listing (e.g. config.json, model.safetensors). Unset: the operator lists the prefix once per generation.',
    }),
    ...selectionFields,
  }),
  [
    {
      rule: `!has(self.keys) || !(${HAS_SELECTION_CEL})`,
      message: 'include, exclude, maxFiles and maxBytes choose the files of a listing: remove them or keys',
      fieldPath: '.keys',
      reason: 'FieldValueForbidden',
      check: (d) => d.keys === undefined || !hasSelection(d),
    },
  ],
);
export type ModelDirectory = z.infer<typeof ModelDirectory>;

export const PreheatGate = withRules(
  z.object({
    name: ObjectName.optional().meta({ description: 'An existing ModelPreheat that must succeed first.' }),
    create: z.boolean().optional().meta({
      description:
        "Create and own a ModelPreheat for fileName (or the files) in objectStorage, with the plugin filter; for a source, of what it resolved to: an OCI artifact's blobs, a Hub repository's files (no objectStorage).",
    }),
    objectStorage: ObjectStorageLocation.optional().meta({
      description:
        'Bucket of fileName (with create: true), or of the files (spec.files): the operator lists the directory with its credentials.',
    }),
    scope: z
      .enum(PREHEAT_SCOPES)
      .optional()
      .meta({ description: 'With create: which peers download (default single_seed_peer).' }),
    schedulerClusterIDs: distinct(z.array(z.int().min(1)).max(100))
      .optional()
      .meta({ description: 'With create: scheduler clusters to preheat in; empty means all.' }),
    manager: ManagerRef.optional().meta({
      description: "With create: manager to use; defaults to the operator's --manager-url.",
    }),
    peerDaemonVersion: PeerDaemonVersion.optional(),
    targetNodes: z.boolean().optional().meta({
      description:
        "With create: preheat the peers on the nodes of the replicas (scope all_peers with the nodes' InternalIPs), so each replica's download is a local hit; new pods' nodes are preheated as soon as they are scheduled. Default: true unless scope is set. Replicas whose node is unknown fall back to the seed peers.",
    }),
    maxWait: durationBetween('0s', '1h').default('5m').meta({
      description:
        "How long a replica waits for its node's preheat before it downloads anyway (from the seed peers or the origin); at most 1h.",
    }),
    evictOnDelete: z.boolean().optional().meta({
      description: 'With create: delete the task from every peer when the ServedModel is deleted.',
    }),
    cacheRefreshInterval: durationBetween('1m', '24h').optional().meta({
      description:
        'With create: how often status.cache (which peers hold the model) is refreshed; from 1m to 24h.',
    }),
  }),
  [
    {
      rule: '!has(self.targetNodes) || !self.targetNodes || (has(self.create) && self.create)',
      message:
        'targetNodes needs create: true (the operator preheats the nodes through the ModelPreheat it owns)',
      fieldPath: '.targetNodes',
      reason: 'FieldValueInvalid',
      check: (p) => p.targetNodes !== true || p.create === true,
    },
    {
      rule: "!has(self.targetNodes) || !self.targetNodes || !has(self.scope) || self.scope == 'all_peers'",
      message: 'targetNodes preheats node peers (scope all_peers): leave scope unset or set it to all_peers',
      fieldPath: '.scope',
      reason: 'FieldValueInvalid',
      check: (p) => p.targetNodes !== true || p.scope === undefined || p.scope === 'all_peers',
    },
    {
      rule: 'has(self.name) != (has(self.create) && self.create)',
      message: 'set either name (an existing ModelPreheat) or create: true',
      fieldPath: '.name',
      reason: 'FieldValueInvalid',
      check: (p) => (p.name !== undefined) !== (p.create === true),
    },
  ],
);

export const ServedModelSpec = withRules(
  z.object({
    modelName: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'must be letters, digits, _ . -')
      .meta({ description: 'Model name in the model server.' }),
    version: z
      .string()
      .max(64)
      .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/)
      .optional()
      .meta({ description: "Model version (the archive's); changing it rolls the new version out." }),
    fileName: ObjectKey.optional().meta({
      description:
        "Model archive object key (e.g. resnet/resnet-18.mar), sent as file_name to the endpoint plugin, which downloads it through the local peer; the plugin's object-key rules apply. Set this, files or source.",
    }),
    files: ModelDirectory.optional().meta({
      description:
        "A model that is a directory (safetensors shards, a model repository version): its files in preheat.objectStorage's bucket, placed by the model server's peerload agent with the preheat's task identity. Set this, fileName or source; needs preheat.objectStorage and a model server whose driver loads directories.",
    }),
    source: ModelSource.optional().meta({
      description: `A model from elsewhere than a bucket (an OCI registry or a Hugging Face repository), placed as a directory by the model server's peerload agent. Set this, fileName or files; needs a driver that loads directories (${listed(DIRECTORY_DRIVERS)}) and modelServer.agent. With preheat.create no objectStorage: the source says where the bytes are.`,
    }),
    modelServer: ModelServer.meta({
      description: 'Where the model-server replicas are: a Service (every ready endpoint) or static URLs.',
    }),
    workers: Workers.default({ min: 1 }).meta({
      description: `Worker counts on every replica; the model is ready on a replica once min workers are READY. What a count is depends on the driver: ${SCALING_WORDS}.`,
    }),
    registration: Registration.optional().meta({
      description:
        'Registration parameters passed to the model server (drivers whose options include registration); unset ones come from the archive.',
    }),
    preheat: PreheatGate.optional().meta({
      description:
        'Register only after a ModelPreheat succeeded: an existing one (name) or one created and owned (create).',
    }),
    rollout: z
      .object({
        maxConcurrent: z
          .int()
          .min(1)
          .max(1000)
          .default(10)
          .meta({ description: 'Replicas registered at once.' }),
        seedFirst: z.boolean().default(true).meta({
          description: 'Register on one replica first so the P2P network holds the model, then fan out.',
        }),
        strategy: z
          .enum(ROLLOUT_STRATEGIES)
          .default('Rolling')
          .meta({
            description: `How a change of version reaches the replicas. Rolling (the default): replica by replica, each switching to the new version once it is ready there, then dropping the old ones. Staged: the new version staged on every replica without serving it (TorchServe: registered and ready; Triton: its files placed by the agent), then switched on every replica at once (TorchServe: made the default; Triton: loaded beside the old one, the load time included) (the mixed-version window is only that switch, in status.rollout), then the old version dropped; a new version that fails to load on any replica, or makes no progress within progressDeadlineSeconds, is rolled back on every replica (status.rollout, Degraded reason RolledBack). Needs spec.version and a driver that stages (${listed(STAGING_DRIVERS)}).`,
          }),
        progressDeadlineSeconds: z
          .int()
          .min(10)
          .max(86_400)
          .optional()
          .meta({
            description: `Staged only: a rollout that makes no progress (a replica staged or switched) for this long is rolled back (default ${DEFAULT_PROGRESS_DEADLINE_SECONDS}).`,
          }),
        paused: z.boolean().optional().meta({
          description:
            'Staged only: true holds a rollout where it is (no new version staged, no switch started; a switch under way is finished, a rollback goes on); the deadline is not counted while paused.',
        }),
        canary: Canary.optional().meta({
          description:
            'Staged only: once every replica has the new version staged, these replicas switch first and are probed (the version ready, and the probe answered as expected) for holdSeconds; then the others switch at once. A failed probe rolls every replica back before any other switched (status.rollout reason CanaryFailed).',
        }),
      })
      .default({ maxConcurrent: 10, seedFirst: true, strategy: 'Rolling' })
      .meta({
        description: 'How registration fans out over the replicas, and how a new version is rolled out.',
      }),
    deletion: z
      .object({
        gracePeriod: durationBetween('0s', '24h').optional().meta({
          description:
            "How long deletion keeps retrying replicas that cannot be reached before it lets go of them (default: the operator's --cleanup-grace-period, 2m); at most 24h.",
        }),
      })
      .optional()
      .meta({ description: 'What deletion does about replicas it cannot unregister the model from.' }),
  }),
  [
    // fileName's own rules are the object-key rules (objectkey.ts), on the field itself.
    {
      rule: '[has(self.fileName), has(self.files), has(self.source)].filter(x, x).size() == 1',
      message: `set exactly one of fileName (an archive), files (a directory in a bucket) and source (${SOURCE_MEMBERS.join(' or ')})`,
      fieldPath: '.fileName',
      reason: 'FieldValueInvalid',
      check: (s) => countSet(s.fileName, s.files, s.source) === 1,
    },
    {
      // Drivers the table knows cannot load a directory are refused here; a name without a driver is the
      // reconcile's UnknownDriver.
      rule: `!has(self.source) || (!(${celDriver('self.modelServer.driver')} in ${celList(NO_DIRECTORY_DRIVERS)}) && has(self.modelServer.agent))`,
      message: `source places a directory through the peerload agent: use a driver that loads directories (${listed(DIRECTORY_DRIVERS)}) and set modelServer.agent`,
      fieldPath: '.source',
      reason: 'FieldValueInvalid',
      check: (s) =>
        s.source === undefined ||
        (!has(NO_DIRECTORY_DRIVERS, s.modelServer.driver) && s.modelServer.agent !== undefined),
    },
    {
      rule: '!has(self.preheat) || !has(self.preheat.create) || !self.preheat.create || has(self.preheat.objectStorage) || has(self.source)',
      message:
        'preheat.create: true needs preheat.objectStorage (the bucket of fileName or files); a source says itself where the bytes are',
      fieldPath: '.preheat.objectStorage',
      reason: 'FieldValueRequired',
      check: (s) =>
        s.preheat?.create !== true || s.preheat.objectStorage !== undefined || s.source !== undefined,
    },
    {
      rule: '!has(self.source) || !has(self.preheat) || !has(self.preheat.objectStorage)',
      message:
        'a source says where the bytes are: remove preheat.objectStorage (it is the bucket of fileName or files)',
      fieldPath: '.preheat.objectStorage',
      reason: 'FieldValueForbidden',
      check: (s) => s.source === undefined || s.preheat?.objectStorage === undefined,
    },
    {
      rule: '!has(self.files) || (has(self.preheat) && has(self.preheat.objectStorage))',
      message:
        "files needs preheat.objectStorage: the bucket the directory is in (the operator lists it with that Secret; the model server's agent signs with its own)",
      fieldPath: '.files',
      reason: 'FieldValueRequired',
      check: (s) => s.files === undefined || s.preheat?.objectStorage !== undefined,
    },
    {
      rule: `!(${celDriver('self.modelServer.driver')} in ${celList(FIXED_DRIVERS)}) || !has(self.workers) || (self.workers.min == 1 && (!has(self.workers.max) || self.workers.max == 1))`,
      message: `the ${listed(FIXED_DRIVERS)} servers have no per-model worker count: leave workers unset or set min (and max) to 1`,
      fieldPath: '.workers',
      reason: 'FieldValueInvalid',
      check: (s) =>
        !has(FIXED_DRIVERS, s.modelServer.driver) ||
        (s.workers.min === 1 && (s.workers.max === undefined || s.workers.max === 1)),
    },
    {
      rule: `!has(self.rollout) || !has(self.rollout.strategy) || self.rollout.strategy != 'Staged' || !(${celDriver('self.modelServer.driver')} in ${celList(NO_STAGING_DRIVERS)})`,
      message: `rollout.strategy Staged needs a server that can hold a new version without serving it (${listed(STAGING_DRIVERS)}); ${STAGED_REFUSALS}: set rollout.strategy to Rolling (or leave it unset)`,
      fieldPath: '.rollout.strategy',
      reason: 'FieldValueForbidden',
      check: (s) => s.rollout.strategy !== 'Staged' || !has(NO_STAGING_DRIVERS, s.modelServer.driver),
    },
    {
      rule: "!has(self.rollout) || !has(self.rollout.strategy) || self.rollout.strategy != 'Staged' || has(self.version)",
      message:
        'rollout.strategy Staged switches every replica from one version to another: set version (the version the archive registers)',
      fieldPath: '.version',
      reason: 'FieldValueRequired',
      check: (s) => s.rollout.strategy !== 'Staged' || s.version !== undefined,
    },
    {
      rule: "!has(self.rollout) || (has(self.rollout.strategy) && self.rollout.strategy == 'Staged') || (!has(self.rollout.paused) && !has(self.rollout.progressDeadlineSeconds))",
      message:
        'rollout.paused and rollout.progressDeadlineSeconds are read by rollout.strategy Staged only: set strategy to Staged or remove them',
      fieldPath: '.rollout',
      reason: 'FieldValueForbidden',
      check: (s) =>
        s.rollout.strategy === 'Staged' ||
        (s.rollout.paused === undefined && s.rollout.progressDeadlineSeconds === undefined),
    },
    {
      // Rolling switches each replica as soon as it is ready there: there is no moment all are staged to hold at.
      rule: "!has(self.rollout) || !has(self.rollout.canary) || (has(self.rollout.strategy) && self.rollout.strategy == 'Staged')",
      message:
        'rollout.canary switches a few replicas once every replica has the new version staged: set rollout.strategy to Staged or remove canary',
      fieldPath: '.rollout.canary',
      reason: 'FieldValueForbidden',
      check: (s) => s.rollout.canary === undefined || s.rollout.strategy === 'Staged',
    },
    {
      rule: `!has(self.rollout) || !has(self.rollout.canary) || !has(self.rollout.canary.probe) || !(${celDriver('self.modelServer.driver')} in ${celList(NO_PROBE_DRIVERS)})`,
      message: `rollout.canary.probe needs a driver that sends inference probes (${listed(PROBE_DRIVERS)}); ${PROBE_REFUSALS}: remove probe (the canary is then checked by the server's version-ready answer)`,
      fieldPath: '.rollout.canary.probe',
      reason: 'FieldValueForbidden',
      check: (s) => s.rollout.canary?.probe === undefined || !has(NO_PROBE_DRIVERS, s.modelServer.driver),
    },
    {
      rule: `!has(self.rollout) || !has(self.rollout.canary) || !has(self.rollout.canary.probe) || !(${celDriver('self.modelServer.driver')} in ${celList(PROBE_PORT_DRIVERS)}) || has(self.rollout.canary.probe.port)`,
      message: `the ${listed(PROBE_PORT_DRIVERS)} driver sends the probe to the server's inference port, not the management one: set rollout.canary.probe.port (TorchServe: 8080 by default)`,
      fieldPath: '.rollout.canary.probe.port',
      reason: 'FieldValueRequired',
      check: (s) =>
        s.rollout.canary?.probe === undefined ||
        !has(PROBE_PORT_DRIVERS, s.modelServer.driver) ||
        s.rollout.canary.probe.port !== undefined,
    },
    {
      rule: `!has(self.rollout) || !has(self.rollout.canary) || !has(self.rollout.canary.probe) || !has(self.rollout.canary.probe.port) || !(${celDriver('self.modelServer.driver')} in ${celList(PROBE_NO_PORT_DRIVERS)})`,
      message: `the ${listed(PROBE_NO_PORT_DRIVERS)} drivers send the probe to the replica's endpoint, which answers inference too: remove rollout.canary.probe.port`,
      fieldPath: '.rollout.canary.probe.port',
      reason: 'FieldValueForbidden',
      check: (s) =>
        s.rollout.canary?.probe?.port === undefined || !has(PROBE_NO_PORT_DRIVERS, s.modelServer.driver),
    },
    {
      rule: `!has(self.registration) || ${celDriver('self.modelServer.driver')} in ${celList(REGISTRATION_DRIVERS)}`,
      message: `registration is read by the ${listed(REGISTRATION_DRIVERS)} driver only: remove it`,
      fieldPath: '.registration',
      reason: 'FieldValueForbidden',
      check: (s) => s.registration === undefined || has(REGISTRATION_DRIVERS, s.modelServer.driver),
    },
  ],
);
export type ServedModelSpec = z.infer<typeof ServedModelSpec>;

/** Where the rollout on one replica is (status.replicas[].phase). */
export const ReplicaPhase = z.enum(['Pending', 'Downloading', 'Registering', 'Scaling', 'Ready', 'Failed']);
export type ReplicaPhase = z.infer<typeof ReplicaPhase>;

export const ReplicaStatus = z.object({
  endpoint: z.string().meta({ description: 'Management URL of the replica.' }),
  pod: z.string().optional().meta({ description: 'Pod behind the endpoint (Service discovery).' }),
  podUID: z.string().optional().meta({ description: 'UID of that pod: a new UID means a restarted pod.' }),
  registered: z.boolean().meta({ description: 'Whether the model is registered on the replica.' }),
  version: z.string().optional().meta({ description: 'Model version rolled out on the replica.' }),
  readyWorkers: z.int().min(0).meta({ description: 'Workers of the model in state READY.' }),
  ready: z.boolean().meta({ description: 'readyWorkers reached workers.min.' }),
  message: z
    .string()
    .max(1024)
    .optional()
    .meta({ description: "Why the replica is not ready (the model server's answer)." }),
  phase: ReplicaPhase.optional().meta({
    description:
      'Where the rollout on the replica is: Pending (waiting for a registration slot or the seed replica), ' +
      'Downloading (the plugin downloads and registers the archive), Registering (registered, being described), ' +
      'Scaling (workers starting), Ready, Failed.',
  }),
  since: Timestamp.optional().meta({ description: 'When the replica entered its phase.' }),
  node: z.string().optional().meta({ description: 'Node of the pod (EndpointSlice nodeName).' }),
  nodeIP: z
    .string()
    .optional()
    .meta({ description: "The node's InternalIP: where its peer daemon is preheated." }),
  localHit: z.boolean().optional().meta({
    description:
      "Whether the replica's last download was served from its own node's peer cache (nothing crossed the network).",
  }),
  lastUpdateTime: Timestamp.optional().meta({ description: 'When ready or message last changed.' }),
});
export type ReplicaStatus = z.infer<typeof ReplicaStatus>;

/** The nodes' preheat of a node-targeted ServedModel, in counts: bounded whatever the number of nodes. */
export const NodePreheatStatus = z.object({
  batches: z.int().meta({
    description: 'Owned ModelPreheats (<name>-preheat, <name>-preheat-1, ...), each at most 100 nodes.',
  }),
  nodes: z.int().meta({
    description:
      "Node IPs the owned ModelPreheats target. A node whose replicas went stays counted (and targeted by its batch) until its batch takes a new node: dropping it alone would change nothing on the peers but start a new job. So this may exceed the replicas' nodes, and preheated, fetching and failed count such nodes too.",
  }),
  preheated: z.int().meta({ description: 'Nodes whose peer holds the model.' }),
  fetching: z.int().meta({
    description: "Nodes whose peer runs the preheat's job now (their replicas' downloads join it).",
  }),
  failed: z.int().meta({ description: 'Nodes whose preheat failed (their replicas download anyway).' }),
  failures: z
    .array(
      z.object({
        ip: z.string().meta({ description: "The node's InternalIP." }),
        preheat: z.string().meta({ description: 'The ModelPreheat of its batch.' }),
        message: z.string().max(1024).meta({ description: "The peer's or scheduler's words." }),
      }),
    )
    .max(10)
    .optional()
    .meta({ description: 'The first failed nodes.' }),
});

/** Where a Staged rollout is (status.rollout.phase). */
export const ROLLOUT_PHASES = [
  'Staging',
  'Paused',
  'Canary',
  'Switching',
  'Retiring',
  'Complete',
  'RollingBack',
  'RolledBack',
] as const;
export const RolloutPhase = z.enum(ROLLOUT_PHASES);
export type RolloutPhase = z.infer<typeof RolloutPhase>;

export const CanaryStatus = z.object({
  replicas: z.array(z.string().max(512)).max(1000).meta({
    description: 'The canaries (pod and endpoint): they switch first, the others after the hold.',
  }),
  switched: z.int().min(0).meta({ description: 'Canaries serving the new version.' }),
  holdUntil: Timestamp.optional().meta({
    description:
      'When the others switch if every probe passes (set once every canary serves the new version).',
  }),
  passes: z.int().min(0).meta({ description: 'Probes of a canary that passed.' }),
  failures: z.int().min(0).meta({ description: 'Probes of a canary that failed (one rolls back).' }),
  lastProbeTime: Timestamp.optional().meta({ description: 'When the canaries were last probed.' }),
  promoted: z.boolean().optional().meta({ description: 'The hold passed: the others switch.' }),
});
export type CanaryStatus = z.infer<typeof CanaryStatus>;

export const RolloutStatus = z.object({
  phase: RolloutPhase.meta({
    description:
      'Staging (the new version staged on every replica, not served: registered and ready, or its files placed), Paused (spec.rollout.paused holds it), Canary (spec.rollout.canary: the canaries switched and probed, the others waiting), Switching (made the default, or loaded, on every replica at once), Retiring (the old version unregistered), Complete; RollingBack (every replica put back on previousVersion, the new one unregistered), RolledBack (until a new generation or a new value of the peerload.io/retry-rollout annotation).',
  }),
  version: z.string().meta({ description: 'The version rolled out (spec.version).' }),
  previousVersion: z
    .string()
    .optional()
    .meta({ description: 'The version the replicas served before: where a rollback puts them.' }),
  attempt: z.string().meta({
    description:
      "Which try this is: the generation and the peerload.io/retry-rollout annotation's value it was started for.",
  }),
  replicas: z.int().min(0).meta({ description: 'Replicas serving the model when the rollout looked last.' }),
  staged: z.int().min(0).meta({ description: 'Replicas with the new version registered and ready.' }),
  switched: z.int().min(0).meta({ description: 'Replicas serving the new version as their default.' }),
  reason: z.string().optional().meta({
    description:
      'Why it rolled back: LoadFailed (a replica could not load the new version), ProgressDeadlineExceeded, or CanaryFailed (a canary failed its probe: the message says what it got and what was expected).',
  }),
  message: z
    .string()
    .max(1024)
    .optional()
    .meta({ description: 'What happened, naming the replica and the fix.' }),
  startTime: Timestamp.meta({ description: 'When this try started.' }),
  lastProgressTime: Timestamp.meta({
    description: 'When a replica was last staged or switched (the progress deadline counts from here).',
  }),
  switchStartTime: Timestamp.optional().meta({ description: 'When the switch started.' }),
  switchEndTime: Timestamp.optional().meta({
    description: 'When every replica served the new version.',
  }),
  switchWindowMs: z.int().min(0).optional().meta({
    description:
      'How long replicas served different versions: from the first default switched to the last (ms).',
  }),
  completionTime: Timestamp.optional().meta({ description: 'When it completed or rolled back.' }),
  canary: CanaryStatus.optional().meta({ description: 'The canary, with spec.rollout.canary.' }),
});
export type RolloutStatus = z.infer<typeof RolloutStatus>;

export const ServedModelStatus = z.object({
  observedGeneration: z
    .int()
    .optional()
    .meta({ description: 'metadata.generation the operator last acted on.' }),
  ready: z.string().optional().meta({ description: 'readyReplicas/desiredReplicas, for kubectl get.' }),
  readyReplicas: z.int().optional().meta({ description: 'Replicas where the model is READY.' }),
  desiredReplicas: z
    .int()
    .optional()
    .meta({ description: 'Replicas found (ready endpoints, or static endpoints).' }),
  servedVersion: z.string().optional().meta({ description: 'Version that is default on every replica.' }),
  replicas: z.array(ReplicaStatus).max(1000).optional().meta({
    description:
      'Per replica: registered, version, READY workers and why not ready. Past 192 KiB of rows (about 500 replicas) the rows leave out pod, podUID, node, nodeIP and lastUpdateTime, and past that again keep the first 50 messages only.',
  }),
  preheatName: z.string().optional().meta({ description: 'ModelPreheat gating registration.' }),
  files: z
    .object({
      count: z.int().meta({ description: 'Files of the directory (spec.files).' }),
      bytes: z.int().meta({ description: 'Bytes they hold together (0 for files named one by one).' }),
      digest: z.string().meta({
        description:
          "Digest of the listing (each path and size): equal to the owned ModelPreheat's status.files.digest when both listed the same content.",
      }),
    })
    .optional()
    .meta({ description: "A directory's listing for this generation (spec.files)." }),
  source: SourceStatus.optional().meta({
    description:
      'What spec.source resolved to for observedGeneration (an OCI tag to its manifest digest, a Hub revision to its commit): resolved again only when the generation changes or the peerload.io/refresh-source annotation differs from refresh.',
  }),
  nodePreheat: NodePreheatStatus.optional().meta({
    description:
      "With node targeting: the nodes' preheat in counts over the owned ModelPreheats (one per 100 nodes).",
  }),
  cache: CacheStatus.optional().meta({
    description: "Which peers hold the model (the ModelPreheat's status.cache).",
  }),
  rollout: RolloutStatus.optional().meta({
    description: 'The last change of version under rollout.strategy Staged: where it is, or how it ended.',
  }),
  conditions: Conditions.optional(),
});
export type ServedModelStatus = z.infer<typeof ServedModelStatus>;

export const ServedModel = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal('ServedModel'),
  metadata: ObjectMeta,
  spec: ServedModelSpec,
  status: ServedModelStatus.optional(),
});
export type ServedModel = z.infer<typeof ServedModel>;

/** Name of the ModelPreheat a ServedModel with `preheat.create` owns. */
export const ownedPreheatName = (sm: { metadata: { name: string } }) =>
  `${sm.metadata.name}-preheat`.slice(0, 253);

/** Whether a ServedModel's owned preheat targets the peers on its replicas' nodes (`preheat.targetNodes`). */
export const targetsNodes = (spec: ServedModelSpec): boolean =>
  spec.preheat?.create === true && (spec.preheat.targetNodes ?? spec.preheat.scope === undefined);

/** The manager's bound on `ips` in one job. */
export const MAX_TARGET_IPS = 100;

/**
 * The spec of the ModelPreheat a ServedModel with `preheat.create` owns. With node targeting and known node IPs,
 * it preheats those nodes' peers (scope all_peers, targets.ips); without any, the seed peers (the fallback). A
 * spec.source's content is what its resolution found (`source`), else the bucket's objects.
 */
export function ownedPreheatSpec(
  spec: ServedModelSpec,
  nodeIPs: readonly string[] = [],
  source?: SourcePreheat,
): Record<string, unknown> {
  const p = spec.preheat!;
  const ips = targetsNodes(spec) ? [...new Set(nodeIPs)].sort().slice(0, MAX_TARGET_IPS) : [];
  return JSON.parse(
    JSON.stringify({
      ...preheatContent(spec, source),
      ...(ips.length > 0 ? { scope: 'all_peers', targets: { ips } } : { scope: p.scope }),
      schedulerClusterIDs: p.schedulerClusterIDs,
      manager: p.manager,
      peerDaemonVersion: p.peerDaemonVersion,
      evictOnDelete: p.evictOnDelete,
      cacheRefreshInterval: p.cacheRefreshInterval,
    }),
  );
}

function preheatContent(spec: ServedModelSpec, source: SourcePreheat | undefined): Record<string, unknown> {
  if (!source)
    return { type: 'file', objectStorage: { ...spec.preheat!.objectStorage, ...ownedPreheatObjects(spec) } };
  if ('image' in source)
    return {
      type: 'image',
      url: source.image.url,
      imageCredentialsSecretRef: source.image.credentialsSecretRef,
    };
  if ('source' in source) return { type: 'file', source: source.source };
  return {
    type: 'file',
    urls: source.urls,
    filteredQueryParams: source.filter.length > 0 ? source.filter : undefined,
  };
}

/** The prefix as a directory: `''` or ending in one `/`. */
export const directoryOf = (prefix: string): string => (prefix === '' ? '' : prefix.replace(/\/*$/, '/'));

/** What the owned preheat warms: the archive, the files named one by one, or the directory as the spec chooses it. */
function ownedPreheatObjects(spec: ServedModelSpec): Record<string, unknown> {
  const files = spec.files;
  if (!files) return { keys: [spec.fileName] };
  if (files.keys) return { keys: files.keys.map((k) => directoryOf(files.prefix) + k) };
  const { prefix, include, exclude, maxFiles, maxBytes } = files;
  return { prefix, include, exclude, maxFiles, maxBytes };
}

/** How a driver reaches one replica, as the spec says (the driver's `ReplicaAccess`). */
export function replicaAccess(spec: ServedModelSpec) {
  const ms = spec.modelServer;
  return { pluginPath: ms.pluginPath, tokenSecretRef: ms.managementTokenSecretRef, agent: ms.agent };
}

/**
 * Every address a static-endpoint spec makes the operator call with a credential: the endpoints, and with an agent
 * the agents beside them (the same host at the agent's port), so the admin's host rules with ports hold for both.
 */
export function staticAddresses(spec: ServedModelSpec): string[] {
  const endpoints = spec.modelServer.endpoints ?? [];
  const agent = spec.modelServer.agent;
  if (!agent) return [...endpoints];
  const agents = endpoints.map((e) => {
    const u = new URL(e);
    u.protocol = `${agent.scheme ?? 'http'}:`;
    u.port = String(agent.port);
    return u.origin;
  });
  return [...endpoints, ...agents];
}
