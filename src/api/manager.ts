import { z } from 'zod';
import {
  BaseURL,
  ObjectName,
  SecretKeyRef,
  SecretRef,
  durationBetween,
  withRules,
  countSet,
} from './common.ts';

/** The fields that say how to talk to a manager: shared by a resource's `spec.manager` and a ClusterManager. */
export const managerConnectionFields = {
  apiPath: z.enum(['/api/v1', '/oapi/v1']).default('/api/v1').meta({
    description:
      'Job API prefix: /api/v1 (no auth, or a JWT from user sign-in on manager v2.4.1+) or /oapi/v1 (personal access tokens).',
  }),
  argsDialect: z.enum(['current', 'legacy']).default('current').meta({
    description:
      'How to send the query-parameter filter: current (`filtered_query_params`, v2.1.55+) or legacy (`filter`, before v2.1.31).',
  }),
  requestTimeout: durationBetween('1s', '5m')
    .default('30s')
    .meta({ description: 'Time-out of one request to the manager; from 1s to 5m.' }),
};

/**
 * How to reach the P2P manager's job API. Optional on each resource: the operator's `--manager-url` (and
 * friends) is the default, so most resources name no manager at all. A namespaced resource names either a
 * ClusterManager (set up by an admin, credentials in the operator's namespace) or a `url`, which the operator
 * contacts only when the admin's `--allowed-manager-hosts` lists its host (src/policy/reach.ts).
 */
export const ManagerRef = withRules(
  z.object({
    url: BaseURL.optional().meta({
      description:
        "Manager base address, e.g. http://dragonfly-manager.dragonfly-system:8080. Contacted only when its host is in the operator's --allowed-manager-hosts (else the resource is Stalled, reason ManagerNotAllowed); or set clusterManagerRef instead.",
    }),
    clusterManagerRef: z
      .object({ name: ObjectName.meta({ description: 'Name of the ClusterManager.' }) })
      .optional()
      .meta({
        description:
          'A ClusterManager (cluster-scoped, set up by an admin) that lists this namespace: its URL and credentials are used, and apiPath, argsDialect and requestTimeout here are ignored.',
      }),
    ...managerConnectionFields,
    tokenSecretRef: SecretKeyRef.optional().meta({
      description: 'Personal access token, sent as `Authorization: Bearer`. Required by /oapi/v1.',
    }),
    signInSecretRef: SecretRef.optional().meta({
      description:
        'Secret with keys `username` and `password` for /api/v1/users/signin (JWT, renewed before expiry).',
    }),
  }),
  [
    {
      rule: 'has(self.url) != has(self.clusterManagerRef)',
      message: 'set exactly one of url and clusterManagerRef',
      fieldPath: '.url',
      reason: 'FieldValueInvalid',
      check: (m) => countSet(m.url, m.clusterManagerRef) === 1,
    },
    {
      rule: '!has(self.clusterManagerRef) || !(has(self.tokenSecretRef) || has(self.signInSecretRef))',
      message: 'clusterManagerRef brings its own credentials: remove tokenSecretRef and signInSecretRef',
      fieldPath: '.clusterManagerRef',
      reason: 'FieldValueForbidden',
      check: (m) => m.clusterManagerRef === undefined || countSet(m.tokenSecretRef, m.signInSecretRef) === 0,
    },
    {
      rule: '!(has(self.tokenSecretRef) && has(self.signInSecretRef))',
      message: 'set at most one of tokenSecretRef and signInSecretRef',
      fieldPath: '.signInSecretRef',
      reason: 'FieldValueForbidden',
      check: (m) => countSet(m.tokenSecretRef, m.signInSecretRef) <= 1,
    },
    {
      rule: "has(self.clusterManagerRef) || self.apiPath != '/oapi/v1' || has(self.tokenSecretRef)",
      message: 'apiPath /oapi/v1 needs tokenSecretRef (a personal access token)',
      fieldPath: '.tokenSecretRef',
      reason: 'FieldValueRequired',
      check: (m) =>
        m.clusterManagerRef !== undefined || m.apiPath !== '/oapi/v1' || m.tokenSecretRef !== undefined,
    },
  ],
);
export type ManagerRef = z.infer<typeof ManagerRef>;
