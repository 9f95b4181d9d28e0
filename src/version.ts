/**
 * The package version and the identity peerload gives itself on the wire: `User-Agent: peerload/<version>` on
 * every HTTP client and `fieldManager=peerload-operator` on every apiserver write, so `managedFields` and audit
 * logs name it instead of `unknown`; Events name `peerload.io/operator` as their reporting controller.
 */
// A JSON module import, not a read at run time: the bundler inlines it into the image's CLI (which ships no
// package.json), and from src/ or dist/ the same relative path resolves to the package's own file.
import pkg from '../package.json' with { type: 'json' };

export const VERSION: string = pkg.version;
export const USER_AGENT = `peerload/${VERSION}`;
export const FIELD_MANAGER = 'peerload-operator';
export const REPORTING_CONTROLLER = 'peerload.io/operator';
/** How the operator's Kubernetes client names itself (the runtime's KubeClient takes it; it names no product). */
export const KUBE_IDENTITY = { fieldManager: FIELD_MANAGER, userAgent: USER_AGENT } as const;
