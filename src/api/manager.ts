import { z } from 'zod';
import { BaseURL, SecretKeyRef, SecretRef, durationBetween, withRules, countSet } from './common.ts';

/**
 * How to reach the P2P manager's job API. Optional on each resource: the operator's `--manager-url` (and
 * friends) is the default, so most resources name no manager at all.
 */
export const ManagerRef = withRules(
  z.object({
    url: BaseURL.meta({
      description: 'Manager base address, e.g. http://dragonfly-manager.dragonfly-system:8080.',
    }),
    apiPath: z.enum(['/api/v1', '/oapi/v1']).default('/api/v1').meta({
      description:
        'Job API prefix: /api/v1 (no auth, or a JWT from user sign-in on manager v2.4.1+) or /oapi/v1 (personal access tokens).',
    }),
    tokenSecretRef: SecretKeyRef.optional().meta({
      description: 'Personal access token, sent as `Authorization: Bearer`. Required by /oapi/v1.',
    }),
    signInSecretRef: SecretRef.optional().meta({
      description:
        'Secret with keys `username` and `password` for /api/v1/users/signin (JWT, renewed before expiry).',
    }),
    argsDialect: z.enum(['current', 'legacy']).default('current').meta({
      description:
        'How to send the query-parameter filter: current (`filtered_query_params`, v2.1.55+) or legacy (`filter`, before v2.1.31).',
    }),
    requestTimeout: durationBetween('1s', '5m')
      .default('30s')
      .meta({ description: 'Time-out of one request to the manager; from 1s to 5m.' }),
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
  ],
);
export type ManagerRef = z.infer<typeof ManagerRef>;
