/**
 * Where a namespaced spec may have the operator send a Hugging Face token: the endpoint of a source with a
 * tokenSecretRef must be in the admin's `--allowed-hub-hosts` (default huggingface.co, https only; plain HTTP only
 * to a host listed as `http://host`). Asked before the Secret is
 * read, so a refused endpoint never receives the token (not the listing's, not a file's header). A source without
 * a token sends nothing secret and may name any Hub at a public address (a public mirror; an internal address only
 * when listed: huggingface.ts asks src/http/egress.ts). Pure.
 */
import type { HubSource } from '../api/source-huggingface.ts';
import { DEFAULT_HUB_ENDPOINT } from '../huggingface/endpoint.ts';
import {
  hostAllowed,
  ReachReason,
  refusalText,
  type HostRule,
  type CredentialReach,
} from '../policy/reach.ts';

export function hubReach(source: HubSource, field: string, hubHosts: readonly HostRule[]): CredentialReach {
  if (source.tokenSecretRef === undefined) return { allowed: true };
  const endpoint = source.endpoint ?? DEFAULT_HUB_ENDPOINT;
  if (hostAllowed(endpoint, hubHosts)) return { allowed: true };
  return {
    allowed: false,
    reason: ReachReason.HubNotAllowed,
    message:
      `${field}.endpoint: ${refusalText(endpoint, hubHosts, '--allowed-hub-hosts')}, ` +
      'so the token of tokenSecretRef is not read nor sent; remove the endpoint to use huggingface.co, remove ' +
      'tokenSecretRef for a public repository, or ask an admin to allow the host',
  };
}
