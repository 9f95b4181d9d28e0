/**
 * Generates CustomResourceDefinitions from the zod schemas. zod's JSON Schema output is close to, but not,
 * a Kubernetes structural schema; {@link toStructural} bridges the gap (see the rules it applies).
 */
import { z } from 'zod';
import { GROUP, VERSION } from './common.ts';
import { ClusterManagerSpec } from './clustermanager.ts';
import { ModelPreheatSpec, ModelPreheatStatus } from './modelpreheat.ts';
import { ServedModelSpec, ServedModelStatus } from './servedmodel.ts';

type Json = Record<string, unknown>;

export interface KindInfo {
  kind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  /** Default Namespaced. */
  scope?: 'Namespaced' | 'Cluster';
  spec: z.ZodType;
  /** Kinds without a status (read-only configuration) have no status subresource. */
  status?: z.ZodType;
  description: string;
  printerColumns: { name: string; type: string; jsonPath: string; description?: string; priority?: number }[];
}

const READY_CONDITION = '.status.conditions[?(@.type=="Ready")]';
const readyColumn = {
  name: 'Ready',
  type: 'string',
  jsonPath: READY_CONDITION + '.status',
  description: 'The Ready condition: True, False or Unknown.',
};
/** Shown with -o wide: the cause in words, as cert-manager does. */
const messageColumn = {
  name: 'Message',
  type: 'string',
  jsonPath: READY_CONDITION + '.message',
  priority: 1,
  description: "The Ready condition's message.",
};

export const KINDS: KindInfo[] = [
  {
    kind: 'ModelPreheat',
    plural: 'modelpreheats',
    singular: 'modelpreheat',
    shortNames: ['mph'],
    spec: ModelPreheatSpec,
    status: ModelPreheatStatus,
    description:
      'A preheat job on the P2P manager that makes model files available in the network ahead of use.',
    printerColumns: [
      { name: 'Type', type: 'string', jsonPath: '.spec.type' },
      {
        name: 'State',
        type: 'string',
        jsonPath: '.status.phase',
        description: 'Job state, or RETRYING, UNREACHABLE (manager), BLOCKED (see the Stalled condition).',
      },
      readyColumn,
      { name: 'Job', type: 'integer', jsonPath: '.status.jobID' },
      { name: 'Attempts', type: 'integer', jsonPath: '.status.attempts', priority: 1 },
      { name: 'Group', type: 'string', jsonPath: '.status.groupID', priority: 1 },
      messageColumn,
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
  },
  {
    kind: 'ServedModel',
    plural: 'servedmodels',
    singular: 'servedmodel',
    shortNames: ['sm'],
    spec: ServedModelSpec,
    status: ServedModelStatus,
    description: 'A model registered, scaled and kept ready on every replica of a model server.',
    printerColumns: [
      { name: 'Model', type: 'string', jsonPath: '.spec.modelName' },
      { name: 'Version', type: 'string', jsonPath: '.status.servedVersion' },
      {
        name: 'Rollout',
        type: 'string',
        jsonPath: '.status.rollout.phase',
        description:
          'Where a Staged rollout is: Staging, Paused, Canary, Switching, Retiring, Complete, RollingBack, RolledBack.',
      },
      {
        name: 'Switch-ms',
        type: 'integer',
        jsonPath: '.status.rollout.switchWindowMs',
        description: 'How long the last Staged switch served two versions at once (ms).',
        priority: 1,
      },
      readyColumn,
      {
        name: 'Replicas',
        type: 'string',
        jsonPath: '.status.ready',
        description: 'Replicas where the model is READY / replicas found.',
      },
      {
        name: 'Reason',
        type: 'string',
        jsonPath: READY_CONDITION + '.reason',
        description:
          'Why the model is (not) ready, e.g. ServiceNotFound, PreheatFailed, ModelServerUnavailable.',
      },
      { name: 'File', type: 'string', jsonPath: '.spec.fileName', priority: 1 },
      messageColumn,
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
  },
  {
    kind: 'ClusterManager',
    plural: 'clustermanagers',
    singular: 'clustermanager',
    shortNames: ['cmgr'],
    scope: 'Cluster',
    spec: ClusterManagerSpec,
    description:
      "A P2P manager set up by an admin (credentials from a Secret in the operator's namespace) and the namespaces whose ModelPreheats and ServedModels may use it through spec.manager.clusterManagerRef.",
    printerColumns: [
      { name: 'URL', type: 'string', jsonPath: '.spec.url' },
      { name: 'API', type: 'string', jsonPath: '.spec.apiPath', priority: 1 },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
  },
];

const SAFE_INT = Number.MAX_SAFE_INTEGER;

/**
 * Rewrites zod's JSON Schema into a structural schema the apiserver accepts:
 * - drops `$schema`, `propertyNames` and `additionalProperties: false` (unknown fields are pruned anyway);
 * - drops the ±2^53 bounds zod puts on every integer;
 * - an int-or-string union becomes `x-kubernetes-int-or-string`;
 * - a `format: date-time` string keeps the format and loses zod's long regex.
 */
function toStructural(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toStructural);
  if (node === null || typeof node !== 'object') return node;
  const src = node as Json;
  const anyOf = src.anyOf as Json[] | undefined;
  if (anyOf && anyOf.length === 2) {
    const types = anyOf.map((a) => a.type).sort();
    if (types[0] === 'integer' && types[1] === 'string') return intOrString(src, anyOf);
  }
  const out: Json = {};
  for (const [k, v] of Object.entries(src)) {
    // `id` the keyword (a string), not a property named id (a schema).
    if (k === '$schema' || k === 'propertyNames' || (k === 'id' && typeof v === 'string')) continue;
    if (k === 'additionalProperties' && v === false) continue;
    if ((k === 'minimum' || k === 'maximum') && Math.abs(v as number) >= SAFE_INT) continue;
    if (k === 'pattern' && src.format === 'date-time') continue;
    out[k] = toStructural(v);
  }
  return out;
}

/**
 * The apiserver accepts int-or-string only as `anyOf: [{type: integer}, {type: string}]` with no other keywords
 * in the branches, so the branches' bounds and pattern move into one CEL rule.
 */
function intOrString(src: Json, branches: Json[]): Json {
  const int = branches.find((b) => b.type === 'integer')!;
  const str = branches.find((b) => b.type === 'string')!;
  const intChecks = ['true'];
  if (typeof int.minimum === 'number' && Math.abs(int.minimum) < SAFE_INT)
    intChecks.push(`self >= ${int.minimum}`);
  if (typeof int.maximum === 'number' && Math.abs(int.maximum) < SAFE_INT)
    intChecks.push(`self <= ${int.maximum}`);
  const strChecks = ['true'];
  if (typeof str.pattern === 'string')
    strChecks.push(`self.matches('${str.pattern.replace(/\\/g, '\\\\')}')`);
  if (typeof str.maxLength === 'number') strChecks.push(`self.size() <= ${str.maxLength}`);
  const out: Json = {
    'x-kubernetes-int-or-string': true,
    anyOf: [{ type: 'integer' }, { type: 'string' }],
    'x-kubernetes-validations': [
      {
        rule: `type(self) == int ? (${intChecks.join(' && ')}) : (${strChecks.join(' && ')})`,
        message: `must be an integer from ${int.minimum} to ${int.maximum} or a name matching ${str.pattern}`,
      },
    ],
  };
  for (const k of ['description', 'default']) if (k in src) out[k] = src[k];
  return out;
}

export function openAPISchema(schema: z.ZodType): Json {
  return toStructural(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'throw' })) as Json;
}

export function customResourceDefinition(info: KindInfo): Json {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${info.plural}.${GROUP}` },
    spec: {
      group: GROUP,
      scope: info.scope ?? 'Namespaced',
      names: {
        kind: info.kind,
        listKind: `${info.kind}List`,
        plural: info.plural,
        singular: info.singular,
        shortNames: info.shortNames,
        categories: ['peerload'],
      },
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          ...(info.status ? { subresources: { status: {} } } : {}),
          additionalPrinterColumns: info.printerColumns,
          schema: {
            openAPIV3Schema: {
              type: 'object',
              description: info.description,
              required: ['spec'],
              properties: {
                apiVersion: { type: 'string' },
                kind: { type: 'string' },
                metadata: { type: 'object' },
                spec: { description: `What the ${info.kind} should achieve.`, ...openAPISchema(info.spec) },
                ...(info.status
                  ? {
                      status: {
                        description:
                          'Written by the operator. Conditions: Ready (reached), Reconciling (in progress), Stalled (needs a change; the message names it).',
                        ...openAPISchema(info.status),
                      },
                    }
                  : {}),
              },
            },
          },
        },
      ],
    },
  };
}
