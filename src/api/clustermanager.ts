/**
 * ClusterManager: a P2P manager an admin sets up once for the cluster (URL, credentials from a Secret in the
 * operator's namespace) and the namespaces that may use it. Namespaced resources name it in
 * `spec.manager.clusterManagerRef`, as cert-manager's Certificates name a ClusterIssuer: whoever may create a
 * ModelPreheat then uses the manager the admin chose, with credentials the tenant never reads.
 */
import { z } from 'zod';
import { API_VERSION, BaseURL, ObjectMeta, countSet, distinct, withRules } from './common.ts';
import { managerConnectionFields } from './manager.ts';

const NAME_PATTERN = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const OperatorSecretName = z
  .string()
  .min(1)
  .max(253)
  .regex(NAME_PATTERN, 'must be a lowercase RFC 1123 name')
  .meta({ description: "Name of the Secret, in the operator's namespace." });

const NamespaceName = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a namespace name');

/** A label key (optional DNS prefix / name) as Kubernetes defines it. */
const LabelKey = z
  .string()
  .min(1)
  .max(317)
  .regex(
    /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/,
    'must be a label key',
  );
const LabelValue = z
  .string()
  .max(63)
  .regex(/^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/, 'must be a label value');

/** metav1.LabelSelector. */
export const LabelSelector = z
  .object({
    matchLabels: z.record(LabelKey, LabelValue).optional().meta({
      description: 'Labels a namespace must have (key: value), all of them.',
    }),
    matchExpressions: z
      .array(
        withRules(
          z.object({
            key: LabelKey.meta({ description: 'The label key the requirement is about.' }),
            operator: z
              .enum(['In', 'NotIn', 'Exists', 'DoesNotExist'])
              .meta({ description: "How the label's value relates to values." }),
            values: z
              .array(LabelValue)
              .max(64)
              .optional()
              .meta({ description: 'Values for In and NotIn; empty for Exists and DoesNotExist.' }),
          }),
          [
            {
              rule: "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
              message: 'In and NotIn need values; Exists and DoesNotExist take none',
              fieldPath: '.values',
              reason: 'FieldValueInvalid',
              check: (e) => ['In', 'NotIn'].includes(e.operator) === (e.values?.length ?? 0) > 0,
            },
          ],
        ),
      )
      .max(16)
      .optional()
      .meta({ description: 'Label requirements, all of which a namespace must meet.' }),
  })
  .meta({ description: 'A label selector over namespaces; {} selects every namespace.' });
export type LabelSelector = z.infer<typeof LabelSelector>;

export const ClusterManagerSpec = withRules(
  z.object({
    url: BaseURL.meta({
      description: 'Manager base address, e.g. http://dragonfly-manager.dragonfly-system:8080.',
    }),
    ...managerConnectionFields,
    tokenSecretRef: z
      .object({
        name: OperatorSecretName,
        key: z.string().min(1).max(253).meta({ description: 'Key within the Secret.' }),
      })
      .optional()
      .meta({
        description:
          "Personal access token in a Secret of the OPERATOR's namespace, sent as `Authorization: Bearer`. Required by /oapi/v1.",
      }),
    signInSecretRef: z.object({ name: OperatorSecretName }).optional().meta({
      description:
        "Secret of the OPERATOR's namespace with keys `username` and `password` for /api/v1/users/signin.",
    }),
    namespaces: distinct(z.array(NamespaceName).max(256)).optional().meta({
      description: 'Namespaces whose resources may use this manager (also those namespaceSelector selects).',
    }),
    namespaceSelector: LabelSelector.optional().meta({
      description:
        'Namespaces whose labels match may use this manager (also those listed in namespaces). {} allows every namespace.',
    }),
  }),
  [
    {
      rule: '!(has(self.tokenSecretRef) && has(self.signInSecretRef))',
      message: 'set at most one of tokenSecretRef and signInSecretRef',
      fieldPath: '.signInSecretRef',
      reason: 'FieldValueForbidden',
      check: (m) => countSet(m.tokenSecretRef, m.signInSecretRef) <= 1,
    },
    {
      rule: "self.apiPath != '/oapi/v1' || has(self.tokenSecretRef)",
      message: 'apiPath /oapi/v1 needs tokenSecretRef (a personal access token)',
      fieldPath: '.tokenSecretRef',
      reason: 'FieldValueRequired',
      check: (m) => m.apiPath !== '/oapi/v1' || m.tokenSecretRef !== undefined,
    },
    {
      // No silent default: an admin says which namespaces may use the manager (namespaceSelector: {} for all).
      rule: 'has(self.namespaces) || has(self.namespaceSelector)',
      message:
        'set namespaces and/or namespaceSelector: which namespaces may use this manager (namespaceSelector: {} allows every namespace)',
      fieldPath: '.namespaces',
      reason: 'FieldValueRequired',
      check: (m) => countSet(m.namespaces, m.namespaceSelector) > 0,
    },
  ],
);
export type ClusterManagerSpec = z.infer<typeof ClusterManagerSpec>;

export const ClusterManager = z.object({
  apiVersion: z.literal(API_VERSION),
  kind: z.literal('ClusterManager'),
  metadata: ObjectMeta,
  spec: ClusterManagerSpec,
});
export type ClusterManager = z.infer<typeof ClusterManager>;
