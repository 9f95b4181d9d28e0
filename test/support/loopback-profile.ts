/**
 * The loopback profile: the operator flags a set-up on one machine needs, where every server the operator talks to
 * (the P2P manager, model servers, object stores, registries, Hubs) listens on 127.0.0.0/8 and the tests'
 * EndpointSlices carry 198.18.x.y addresses (test/support/endpointslices.ts).
 *
 * The operator's defaults are a cluster's: its allow-lists name the cloud services' hosts, never loopback, and its
 * metrics are served over HTTPS behind TokenReview. Every way peerload runs on one machine — `npm run demo`,
 * `npm run emulators` and the tests' operators — takes its flags from here, so a new allow-list or default is met
 * in one place; `test/unit/loopback-profile.test.ts` fails when a host allow-list of the operator is not covered.
 * A caller's own flags come after these and win (the flag parser keeps the last value), which is how a test narrows
 * an allow-list to show a refusal.
 */
import { DEFAULT_STORAGE_HOSTS } from '../../src/policy/storage-reach.ts';
import { DEFAULT_HUB_REDIRECT_HOSTS, DEFAULT_HUB_TOKEN_HOSTS } from '../../src/huggingface/endpoint.ts';

/** Every loopback address: the test servers bind 127.0.0.1, the real network's peers 127.0.0.x. */
export const LOOPBACK_HOSTS = '127.0.0.0/8';
/**
 * The same over plain HTTP, for the credential lists (storage, registry, Hub), whose entries without a scheme allow
 * https only: the machine's servers speak plain HTTP.
 */
export const LOOPBACK_PLAIN_HOSTS = `http://${LOOPBACK_HOSTS}`;
/** The addresses the tests' EndpointSlices carry (never routed; the tests' dispatcher connects them to 127.0.0.1). */
export const SLICE_HOSTS = '198.18.0.0/15';

/**
 * Each host allow-list of the operator, as the loopback profile sets it: the operator's default (where it has one)
 * plus loopback, so the public hosts keep working beside the machine's servers.
 */
export const LOOPBACK_ALLOW_LISTS: Readonly<Record<string, string>> = {
  'allowed-manager-hosts': LOOPBACK_HOSTS,
  'allowed-endpoint-hosts': `${LOOPBACK_HOSTS},${SLICE_HOSTS}`,
  'allowed-storage-hosts': `${DEFAULT_STORAGE_HOSTS},${LOOPBACK_PLAIN_HOSTS}`,
  'allowed-registry-hosts': LOOPBACK_PLAIN_HOSTS,
  // The machine's Basic-only test registries hand their test passwords to the agents; a test narrows it to show
  // the refusal (test/integration/servedmodel-oci-credentials.test.ts).
  'allowed-basic-auth-registry-hosts': LOOPBACK_PLAIN_HOSTS,
  'allowed-hub-hosts': `${DEFAULT_HUB_TOKEN_HOSTS},${LOOPBACK_PLAIN_HOSTS}`,
  // The emulated Hub's CDN listens on loopback (plain HTTP), beside the public Hub's CDNs; bare entries of this
  // list are https only too (a redirect's signed URL is as good as the token for that file).
  'allowed-hub-redirect-hosts': `${DEFAULT_HUB_REDIRECT_HOSTS},${LOOPBACK_PLAIN_HOSTS}`,
};

/**
 * The other operator flags a loopback set-up sets, each with why: any port (two operators may run at once), and
 * metrics over plain HTTP (the tests read them without a ServiceAccount token).
 */
export const LOOPBACK_SETTINGS: Readonly<Record<string, string | true>> = {
  'metrics-address': '127.0.0.1:0',
  'no-metrics-secure': true,
};

/** The profile as operator flags, ready to put before a caller's own. */
export function loopbackOperatorFlags(): string[] {
  const flags: string[] = [];
  for (const [flag, value] of Object.entries(LOOPBACK_SETTINGS))
    flags.push(...(value === true ? [`--${flag}`] : [`--${flag}`, value]));
  for (const [flag, hosts] of Object.entries(LOOPBACK_ALLOW_LISTS)) flags.push(`--${flag}`, hosts);
  return flags;
}
