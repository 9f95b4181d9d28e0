/**
 * ModelPreheat: make content available in the P2P network ahead of use, through one manager preheat job per
 * generation (the job API's request and answers are src/manager/types.ts).
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import {
  API_VERSION,
  Conditions,
  HttpUrl,
  ObjectMeta,
  SecretRef,
  Timestamp,
  countSet,
  distinct,
  durationBetween,
  withRules,
  type CelRule,
} from './common.ts';
import { ManagerRef } from './manager.ts';
import { FilteredQueryParams, ObjectStorageSource } from './objectstorage.ts';
import { PreheatSource, PreheatSourceStatus, SOURCE_MEMBERS } from './sources.ts';
import { JOB_STATES, PREHEAT_SCOPES } from '../manager/types.ts';

// The manager's job API defines the job states and preheat scopes; the CRD shows and takes them as they are.
export { PREHEAT_SCOPES, type JobState } from '../manager/types.ts';
/** JOB_STATES and what stands between a resource and its job (see status.phase). */
export const PREHEAT_PHASES = [...JOB_STATES, 'RETRYING', 'UNREACHABLE', 'BLOCKED'] as const;

/** RFC 9110 `token`: what an HTTP field name may be. */
const HEADER_NAME_PATTERN = "^[-!#$%&'*+.^_`|~0-9A-Za-z]+$";
const MAX_HEADERS = 64;

/** Fields the HTTP client sets itself (framing, connection, target host): from a user they break the request. */
const FORBIDDEN_HEADERS = [
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'upgrade',
] as const;

const headerRules: CelRule<Record<string, string>>[] = [
  {
    rule: `self.all(k, !(k.lowerAscii() in [${FORBIDDEN_HEADERS.map((h) => `'${h}'`).join(', ')}]))`,
    message: `header names must not be ${FORBIDDEN_HEADERS.join(', ')}: the HTTP client sets those itself`,
    check: (h) =>
      Object.keys(h).every((k) => !(FORBIDDEN_HEADERS as readonly string[]).includes(k.toLowerCase())),
  },
  {
    rule: `self.all(k, k.size() <= 256 && k.matches(r"${HEADER_NAME_PATTERN}"))`,
    message:
      "header names must be HTTP tokens of at most 256 characters: letters, digits and !#$%&'*+-.^_`|~",
    check: (h) => Object.keys(h).every((k) => k.length <= 256 && new RegExp(HEADER_NAME_PATTERN).test(k)),
  },
];

export const HttpHeaders = withRules(
  z
    .record(
      z.string(),
      withRules(z.string().max(8192), [
        {
          // Forwarded to the manager and on to the origin: a CR or LF would split the request.
          rule: "!self.matches(r'[\\x00-\\x08\\x0a-\\x1f\\x7f]')",
          message: 'header values must not contain CR, LF or other control characters',
          // eslint-disable-next-line no-control-regex -- control characters are what this rule is about
          check: (v) => !/[\x00-\x08\x0a-\x1f\x7f]/.test(v),
        },
      ]),
    )
    .refine((h) => Object.keys(h).length <= MAX_HEADERS, `at most ${MAX_HEADERS} headers`)
    .meta({ maxProperties: MAX_HEADERS }),
  headerRules,
);

const IMAGE_MANIFEST_PATTERN = '^(.*)://(.*)/v2/(.*)/manifests/(.*)$';

/** `1.4`, `1.5.3+` or a version such as 1.4.2 / v1.5.3 (taskIdRule in src/storage/taskid.ts reads it). */
export const PEER_DAEMON_VERSION_PATTERN =
  '^(1\\.5\\.3\\+|v?[0-9]{1,9}\\.[0-9]{1,9}(\\.[0-9]{1,9})?(-[0-9A-Za-z.-]+)?(\\+[0-9A-Za-z.-]+)?)$';
export const PeerDaemonVersion = z
  .string()
  .max(64)
  .regex(
    new RegExp(PEER_DAEMON_VERSION_PATTERN),
    'must be "1.4", "1.5.3+" or the peer daemon\'s (dragonfly-client) version such as 1.4.2 or v1.5.3',
  )
  .meta({
    description:
      "Peer daemon (dragonfly-client) version whose task ids status.tasks shows: 1.4 (below 1.5.3: query kept in order) or 1.5.3+ (sorted), or a version such as 1.4.2. Default: the operator's --peer-daemon-version (1.4).",
  });

/** An IPv4 or IPv6 address, checked by the apiserver (CEL's isIP, Kubernetes 1.30+) and by zod alike. */
export const IPAddress = withRules(z.string().max(45), [
  {
    rule: 'isIP(self)',
    message: 'must be an IPv4 or IPv6 address',
    check: (v) => isIP(v) !== 0,
  },
]);

/**
 * Which peers of the scope download the content: the manager's `ips`, `count` and `percentage` (v2.2.0+, scope
 * all_peers or all_seed_peers; ips at most 100, count at most 200).
 */
export const PreheatTargets = withRules(
  z.object({
    ips: distinct(z.array(IPAddress).min(1).max(100)).optional().meta({
      description:
        "Host IPs of the peers to preheat (a node's InternalIP where the peer daemon runs with hostNetwork). A peer already holding the content for this spec is not preheated again.",
    }),
    count: z.int().min(1).max(200).optional().meta({ description: 'Preheat this many peers of the scope.' }),
    percentage: z
      .int()
      .min(1)
      .max(100)
      .optional()
      .meta({ description: 'Preheat this percentage of the peers of the scope (at least one).' }),
  }),
  [
    {
      rule: '[has(self.ips), has(self.count), has(self.percentage)].filter(x, x).size() == 1',
      message: 'set exactly one of ips, count and percentage',
      fieldPath: '.ips',
      reason: 'FieldValueInvalid',
      check: (t) => countSet(t.ips, t.count, t.percentage) === 1,
    },
  ],
);
export type PreheatTargets = z.infer<typeof PreheatTargets>;

/** What a source fixes itself: the task identity the agents and `peerload fetch hf://` use, the token's path. */
const SOURCE_FIXED = ['filteredQueryParams', 'headers', 'tag', 'application', 'pieceLength'] as const;

export const ModelPreheatSpec = withRules(
  z.object({
    type: z.enum(['file', 'image']).default('file').meta({
      description:
        'file: preheat the URLs as they are; image: resolve an OCI manifest and preheat its blobs.',
    }),
    url: HttpUrl.optional().meta({
      description: 'One URL to preheat (an image manifest URL for type image).',
    }),
    urls: distinct(z.array(HttpUrl).min(1).max(100))
      .optional()
      .meta({ description: 'Several file URLs preheated in one job (type file only).' }),
    objectStorage: ObjectStorageSource.optional().meta({
      description:
        'Objects in a bucket: the operator signs each key and preheats it with the matching filter.',
    }),
    source: PreheatSource.optional().meta({
      description: `A model from elsewhere than a URL or a bucket (${SOURCE_MEMBERS.join(' or ')}), resolved as a ServedModel's spec.source is and preheated with the task ids the peerload agent and \`peerload fetch\` compute.`,
    }),
    filteredQueryParams: FilteredQueryParams.optional().meta({
      description:
        "Query parameters left out of the task id (the manager job's filter). Default: the manager default (S3, GCS, OSS, OBS, COS signatures and ns).",
    }),
    headers: HttpHeaders.optional().meta({
      description:
        'HTTP headers the seed peers send to the origin: names are HTTP tokens, values have no CR, LF or other control characters.',
    }),
    imageCredentialsSecretRef: SecretRef.optional().meta({
      description:
        'type image: Secret with keys `username` and `password` for the registry, or a `kubernetes.io/dockerconfigjson` Secret (its entry for the registry).',
    }),
    platform: z
      .string()
      .max(64)
      .regex(/^[a-z0-9]+\/[a-z0-9_]+(\/[a-z0-9]+)?$/, 'must look like linux/amd64')
      .optional()
      .meta({ description: 'type image: platform to pick from a manifest list, e.g. linux/amd64.' }),
    tag: z.string().max(256).optional().meta({ description: 'Task tag; part of the task id.' }),
    application: z
      .string()
      .max(256)
      .optional()
      .meta({ description: 'Task application; part of the task id.' }),
    pieceLength: z
      .int()
      .min(4194304)
      .max(67108864)
      .optional()
      .meta({ description: 'Piece length in bytes (4 MiB to 64 MiB); part of the task id.' }),
    peerDaemonVersion: PeerDaemonVersion.optional(),
    scope: z
      .enum(PREHEAT_SCOPES)
      .default('single_seed_peer')
      .meta({ description: 'Which peers download the content.' }),
    targets: PreheatTargets.optional().meta({
      description:
        'With scope all_peers or all_seed_peers: which of those peers download (by host IP, count or percentage). Unset: all of them.',
    }),
    schedulerClusterIDs: distinct(z.array(z.int().min(1)).max(100))
      .optional()
      .meta({ description: "IDs of the manager's scheduler clusters to preheat in; empty means all." }),
    timeout: durationBetween('1s', '24h')
      .optional()
      .meta({ description: 'Job time-out on the manager (default 60m there); from 1s to 24h.' }),
    manager: ManagerRef.optional().meta({
      description: "Manager to use; defaults to the operator's --manager-url.",
    }),
    retry: z
      .object({
        limit: z
          .int()
          .min(0)
          .max(100)
          .default(3)
          .meta({ description: 'Jobs created again after a FAILURE.' }),
        backoff: durationBetween('1ms', '1h').default('30s').meta({
          description:
            'First delay before a retry; doubles each time. From 1ms (0s would retry at once) to 1h.',
        }),
      })
      .default({ limit: 3, backoff: '30s' })
      .meta({ description: 'What to do when the job ends in FAILURE.' }),
    deleteJobOnCleanup: z.boolean().default(false).meta({
      description: 'Delete the manager job record when this resource is deleted (the P2P cache stays).',
    }),
    evictOnDelete: z.boolean().default(false).meta({
      description:
        "Delete the preheated tasks from every peer of the network (a manager delete_task job) when this resource is deleted; the next download goes to the origin. Off: the peers' caches keep them until their own GC.",
    }),
    cacheRefreshInterval: durationBetween('1m', '24h').optional().meta({
      description:
        'How often status.cache (which peers hold each task, a manager get_task job) is refreshed once the preheat succeeded. Unset: after success and on demand only (annotate peerload.io/refresh-cache with a new value). From 1m to 24h.',
    }),
  }),
  [
    {
      rule: '[has(self.url), has(self.urls), has(self.objectStorage), has(self.source)].filter(x, x).size() == 1',
      message: `set exactly one of url, urls, objectStorage and source (${SOURCE_MEMBERS.join(' or ')})`,
      fieldPath: '.url',
      reason: 'FieldValueInvalid',
      check: (s) => countSet(s.url, s.urls, s.objectStorage, s.source) === 1,
    },
    {
      rule: "!has(self.source) || self.type == 'file'",
      message: 'source preheats files: leave type unset or file',
      fieldPath: '.type',
      reason: 'FieldValueForbidden',
      check: (s) => s.source === undefined || s.type === 'file',
    },
    {
      rule: `!has(self.source) || ![${SOURCE_FIXED.map((f) => `has(self.${f})`).join(', ')}].exists(x, x)`,
      message: `source fixes the task ids (those the peerload agent and peerload fetch compute: the CDN's query parameters left out, the token's own tag) and keeps the token to the Hub: remove ${SOURCE_FIXED.join(', ')}`,
      fieldPath: '.source',
      reason: 'FieldValueForbidden',
      check: (s) => s.source === undefined || SOURCE_FIXED.every((f) => s[f] === undefined),
    },
    {
      rule: `self.type != 'image' || (has(self.url) && self.url.matches('${IMAGE_MANIFEST_PATTERN}'))`,
      message:
        'type image needs url to be a manifest URL: <scheme>://<registry>/v2/<repository>/manifests/<reference>',
      fieldPath: '.url',
      reason: 'FieldValueInvalid',
      check: (s) =>
        s.type !== 'image' || (s.url !== undefined && new RegExp(IMAGE_MANIFEST_PATTERN).test(s.url)),
    },
    {
      rule: "!has(self.targets) || self.scope != 'single_seed_peer'",
      message: 'targets need scope all_peers (node peers) or all_seed_peers',
      fieldPath: '.targets',
      reason: 'FieldValueInvalid',
      check: (s) => s.targets === undefined || s.scope !== 'single_seed_peer',
    },
    {
      rule: "self.type == 'image' || (!has(self.platform) && !has(self.imageCredentialsSecretRef))",
      message: 'platform and imageCredentialsSecretRef apply to type image only',
      fieldPath: '.platform',
      reason: 'FieldValueForbidden',
      check: (s) => s.type === 'image' || countSet(s.platform, s.imageCredentialsSecretRef) === 0,
    },
  ],
);
export type ModelPreheatSpec = z.infer<typeof ModelPreheatSpec>;

const PeerTask = z.object({
  url: z.string().meta({ description: 'URL the peer downloaded.' }),
  hostname: z.string().optional().meta({ description: 'Host name of the peer.' }),
  ip: z.string().optional().meta({ description: 'IP address of the peer.' }),
  description: z.string().optional().meta({ description: "The peer's own words (the error, on failure)." }),
});

export const MAX_LISTED_TASKS = 20;
/** Tasks whose holders status.cache lists (one get_task job each per refresh). */
export const MAX_CACHE_TASKS = 10;

/** Per targeted peer: the outcome of its preheat, kept while the content stays the same. */
const TargetPeer = z.object({
  ip: z.string().meta({ description: 'Host IP of the peer (from spec.targets.ips).' }),
  hostname: z.string().optional().meta({ description: 'Host name of the peer, as the scheduler knows it.' }),
  state: z.enum(['Preheated', 'Failed']).meta({
    description: 'Preheated: the peer holds the content; Failed: its preheat failed (see message).',
  }),
  jobID: z.int().optional().meta({ description: 'The manager job that preheated it.' }),
  message: z
    .string()
    .max(1024)
    .optional()
    .meta({ description: "The peer's or scheduler's words on failure." }),
});
export type TargetPeer = z.infer<typeof TargetPeer>;

const CachePeer = z.object({
  ip: z.string().meta({ description: 'Host IP of the peer.' }),
  hostname: z.string().optional().meta({ description: 'Host name of the peer.' }),
  hostType: z
    .string()
    .optional()
    .meta({ description: 'normal (a node peer) or super/strong/weak (seed peers).' }),
  finished: z.boolean().meta({ description: 'Whether the peer holds the whole task (false: downloading).' }),
});

export const CacheStatus = z.object({
  observedAt: Timestamp.optional().meta({
    description: 'When the network was last asked (a get_task job ended).',
  }),
  jobID: z.int().optional().meta({ description: 'The last get_task job.' }),
  tasks: z
    .array(
      z.object({
        taskID: z.string().meta({ description: 'P2P task id (as in status.tasks).' }),
        peerCount: z.int().meta({ description: 'Peers that hold the whole task.' }),
        peers: z
          .array(CachePeer)
          .max(MAX_LISTED_TASKS)
          .meta({ description: 'First peers that have the task.' }),
      }),
    )
    .max(MAX_CACHE_TASKS)
    .meta({ description: 'Per task (the first 10): which peers hold it.' }),
  message: z.string().max(1024).optional().meta({ description: 'Why the last refresh failed, if it did.' }),
  refreshing: z
    .array(
      z.object({
        taskID: z.string().meta({ description: 'P2P task id the job is about.' }),
        jobID: z.int().meta({ description: 'Manager job id (the poll path).' }),
      }),
    )
    .max(MAX_CACHE_TASKS)
    .optional()
    .meta({ description: 'get_task jobs of the refresh under way.' }),
  requested: z.string().optional().meta({
    description: 'The value of the peerload.io/refresh-cache annotation the last refresh answered.',
  }),
});
export type CacheStatus = z.infer<typeof CacheStatus>;

/** Failed files status.files names at most (the count is whole). */
export const MAX_LISTED_FILES = 20;
/** Manager jobs of one directory at most (maxFiles at most 10,000, 100 URLs a job). */
export const MAX_DIRECTORY_JOBS = 100;

/** A directory preheat (spec.objectStorage.prefix): what was listed and how its jobs fare, bounded. */
export const DirectoryStatus = z.object({
  generation: z.int().meta({ description: 'metadata.generation the prefix was listed for.' }),
  count: z.int().meta({ description: 'Files listed under the prefix after include/exclude.' }),
  bytes: z.int().meta({ description: 'Bytes the files hold together.' }),
  digest: z.string().meta({
    description:
      'Digest of the listing (each path and size): the directory content this generation preheats. A listing made again (after an operator restart) that differs stops the preheat.',
  }),
  jobsTotal: z.int().meta({ description: 'Manager jobs the files are split into (at most 100 files each).' }),
  jobsSucceeded: z.int().meta({ description: 'Jobs that succeeded.' }),
  failedCount: z.int().optional().meta({ description: 'Files whose job failed (last attempt).' }),
  failed: z
    .array(
      z.object({
        path: z.string().meta({ description: 'The file, relative to the prefix.' }),
        message: z.string().max(512).meta({ description: "The manager's or the peer's words." }),
      }),
    )
    .max(MAX_LISTED_FILES)
    .optional()
    .meta({ description: 'The first files that failed, by path.' }),
});
export type DirectoryStatus = z.infer<typeof DirectoryStatus>;

/** One manager job of a directory preheat. */
export const DirectoryJob = z.object({
  id: z.int().meta({ description: 'Manager job id.' }),
  state: z.enum(JOB_STATES).meta({ description: "The job's state when last looked at." }),
  attempt: z.int().optional().meta({ description: 'The attempt that created it (status.attempts).' }),
});
export type DirectoryJob = z.infer<typeof DirectoryJob>;

export const ModelPreheatStatus = z.object({
  observedGeneration: z
    .int()
    .optional()
    .meta({ description: 'metadata.generation the operator last acted on.' }),
  state: z.enum(JOB_STATES).optional().meta({ description: "The manager job's state." }),
  phase: z.enum(PREHEAT_PHASES).optional().meta({
    description:
      "What `kubectl get` shows as STATE: the job's state, or RETRYING (the last attempt failed, another is scheduled), UNREACHABLE (the manager does not answer or rate-limits), BLOCKED (waiting for a fix: see the Stalled condition).",
  }),
  jobID: z
    .int()
    .optional()
    .meta({ description: 'Manager job id (the poll path); for a directory, its first job (all in jobs).' }),
  groupID: z.string().optional().meta({ description: 'Manager task group id (group_<uuid>).' }),
  managerURL: z.string().optional().meta({ description: 'Manager the job lives on.' }),
  jobGeneration: z
    .int()
    .optional()
    .meta({ description: 'metadata.generation the current job was created for.' }),
  attempts: z.int().optional().meta({ description: 'Jobs created for this generation.' }),
  startedAt: Timestamp.optional().meta({ description: 'When the current job was created.' }),
  completedAt: Timestamp.optional().meta({
    description: 'When the current job ended (SUCCESS or final FAILURE).',
  }),
  nextRetryAt: Timestamp.optional().meta({ description: 'When a failed job will be created again.' }),
  tasks: z
    .array(
      z.object({
        url: z.string().meta({ description: 'URL as preheated (signature parameters included).' }),
        taskID: z.string().meta({ description: 'P2P task id (grep the peer logs for it).' }),
      }),
    )
    .max(100)
    .optional()
    .meta({ description: 'The P2P task id of each preheated URL, to match with peer logs.' }),
  successCount: z.int().optional().meta({ description: 'Peers that downloaded the content.' }),
  failureCount: z.int().optional().meta({ description: 'Peers that failed to download it.' }),
  successTasks: z
    .array(PeerTask)
    .max(MAX_LISTED_TASKS)
    .optional()
    .meta({ description: 'First peers that succeeded.' }),
  failureTasks: z
    .array(PeerTask)
    .max(MAX_LISTED_TASKS)
    .optional()
    .meta({ description: 'First peers that failed.' }),
  files: DirectoryStatus.optional().meta({
    description:
      'A directory preheat (spec.objectStorage.prefix): files, bytes, jobs done of total, failed files.',
  }),
  jobs: z.array(DirectoryJob).max(MAX_DIRECTORY_JOBS).optional().meta({
    description:
      "A directory preheat's manager jobs, in the order of the files they carry (sorted by path, 100 a job).",
  }),
  source: PreheatSourceStatus.optional().meta({
    description:
      'What spec.source resolved to for observedGeneration (a Hub revision to its commit) and how many of its files the job preheats: resolved again only when the generation changes or the peerload.io/refresh-source annotation differs from refresh.',
  }),
  contentKey: z.string().optional().meta({
    description:
      'Digest of what is preheated (the spec without targets): targeted peers carry over while it stays.',
  }),
  peers: z.array(TargetPeer).max(200).optional().meta({
    description:
      'Per targeted peer IP (spec.targets.ips): Preheated or Failed. A peer preheated for this content is not preheated again when targets change.',
  }),
  cache: CacheStatus.optional().meta({
    description:
      'Which peers of the network hold the tasks (manager get_task jobs); see spec.cacheRefreshInterval.',
  }),
  evictionJobs: z
    .array(
      z.object({
        taskID: z.string().meta({ description: 'P2P task id the job is about.' }),
        jobID: z.int().meta({ description: 'Manager job id (the poll path).' }),
      }),
    )
    .max(100)
    .optional()
    .meta({ description: 'delete_task jobs of an eviction under way (spec.evictOnDelete, on deletion).' }),
  evictedTasks: z.int().optional().meta({
    description:
      'Tasks of a directory whose delete_task jobs ended, in earlier batches of at most 100 (spec.evictOnDelete).',
  }),
  conditions: Conditions.optional(),
});
export type ModelPreheatStatus = z.infer<typeof ModelPreheatStatus>;

export const ModelPreheat = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal('ModelPreheat'),
  metadata: ObjectMeta,
  spec: ModelPreheatSpec,
  status: ModelPreheatStatus.optional(),
});
export type ModelPreheat = z.infer<typeof ModelPreheat>;
