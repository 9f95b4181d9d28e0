/**
 * The object-key rules: what `ServedModel.spec.fileName` and `ModelPreheat.spec.objectStorage.keys[]` may hold.
 * They are the endpoint plugin's own rules (plugin ModelRegistration.localFileName, which refuses anything else with
 * a 400 at registration time), written once here for the apiserver (CEL) and the operator (zod). The two sides are
 * held together by test/vectors/object-keys.json, which both the vitest and the JUnit suites check.
 */
import { z } from 'zod';
import { withRules, type CelRule } from './common.ts';

const MAX_OBJECT_KEY_LENGTH = 1024;

const OBJECT_KEY_RULES: CelRule<string>[] = [
  {
    rule: "self.matches(r'[^ ]')",
    message: 'must be an object key, not blank',
    check: (k) => /[^ ]/.test(k),
  },
  {
    rule: "!self.startsWith('/')",
    message: 'must be a relative object key, without a leading /',
    check: (k) => !k.startsWith('/'),
  },
  {
    rule: "!self.contains('\\\\')",
    message: 'must not contain a backslash',
    check: (k) => !k.includes('\\'),
  },
  {
    rule: "!self.matches(r'[\\x00-\\x1f\\x7f-\\x9f]')",
    message: 'must not contain control characters',
    // eslint-disable-next-line no-control-regex -- control characters are what this rule is about
    check: (k) => !/[\x00-\x1f\x7f-\x9f]/.test(k),
  },
  {
    rule: "!('/' + self + '/').matches(r'/\\.{0,2}/')",
    message: "must not contain empty, '.' or '..' path segments (no //, ./, ../ or trailing /)",
    check: (k) => !/\/\.{0,2}\//.test(`/${k}/`),
  },
  {
    rule: "!self.matches(r'(^|/)\\.[^/]*$')",
    message: "must not name a hidden file (a last segment starting with '.')",
    check: (k) => !/(^|\/)\.[^/]*$/.test(k),
  },
];

/** The first rule `key` breaks, or undefined when the plugin would take it. */
export function objectKeyProblem(key: string): string | undefined {
  if (key.length === 0) return 'must not be empty';
  if (key.length > MAX_OBJECT_KEY_LENGTH) return `must be at most ${MAX_OBJECT_KEY_LENGTH} characters`;
  return OBJECT_KEY_RULES.find((r) => !r.check(key))?.message;
}

export const ObjectKey = withRules(z.string().min(1).max(MAX_OBJECT_KEY_LENGTH), OBJECT_KEY_RULES);
