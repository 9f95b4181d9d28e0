/** Compares the two sides of a pair: equal task ids, or every reason why not. */
import { taskID, type TaskIdRule } from '../storage/taskid.ts';
import type { Side, SideName } from './side.ts';
import { symbolicURL } from './side.ts';
import { ALL_SIGNATURE_NAMES, SIGNATURE_PARAMS, redact, type Variation } from './signatures.ts';
import { factsOf, stripQuery, type Facts } from './url-location.ts';

export interface Reason {
  code: string;
  message: string;
}

export interface CheckResult {
  status: 'OK' | 'MISS';
  /** The object key, or the preheat URL (signature values redacted). */
  label: string;
  /** Which document the pair comes from. */
  source: string;
  /** The task id both share (OK), or each side's when it is stable. */
  taskID?: string | undefined;
  preheat?: SideReport | undefined;
  plugin?: SideReport | undefined;
  reasons: Reason[];
}

export interface SideReport {
  url: string;
  filter: string[];
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  /** Undefined when it changes with every signing (or depends on an unknown credential). */
  taskID?: string | undefined;
  /** The daemon version's task id rule the id follows. */
  rule: TaskIdRule;
}

/** Query pairs of a URL the daemon keeps (as it splits and decodes them), by name. */
function keptQuery(url: string, filter: readonly string[], rule: TaskIdRule): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const q = new URL(url).search.replace(/^\?/, '');
  const dropped = new Set(filter);
  for (const segment of q === '' ? [] : q.split('&')) {
    // Only the 1.5.3+ rule drops segments holding `;` (client 1.4 form-decodes them like any other).
    if (rule === '1.5.3+' && segment.includes(';')) continue;
    for (const [k, v] of new URLSearchParams('?' + segment)) {
      if (!dropped.has(k)) out.set(k, [...(out.get(k) ?? []), v]);
    }
  }
  return out;
}

function queryNames(url: string): Set<string> {
  return new Set(new URL(url).searchParams.keys());
}

function variation(side: Side, name: string, values: string[]): Variation | undefined {
  const p = side.signer && SIGNATURE_PARAMS[side.signer.type].find((s) => s.name === name);
  if (p) return p.varies;
  // A preheat URL written with a signature in it: its values are fixed, the plugin's are fresh every time.
  if (ALL_SIGNATURE_NAMES.has(name) && values.length > 0) return 'signing';
  return undefined;
}

const show = (v: string | number | undefined) =>
  v === undefined ? '(none)' : typeof v === 'number' ? String(v) : `"${v}"`;

/** Why two unsigned URLs differ, field by field. */
function urlReasons(preheat: Side, plugin: Side): Reason[] {
  const reasons: Reason[] = [];
  const add = (code: string, what: string, a: string | undefined, b: string | undefined) => {
    if (a !== b)
      reasons.push({ code, message: `${what}: preheat ${a ?? '(none)'}, plugin ${b ?? '(none)'}` });
  };
  if (preheat.location && plugin.location) {
    const a = factsOf(preheat.location, preheat.key ?? '');
    const b = factsOf(plugin.location, plugin.key ?? '');
    add('kind', 'storage kind', a.kind, b.kind);
    if (a.kind === b.kind) {
      const withScheme = (f: Facts) =>
        f.endpoint.startsWith('(') ? f.endpoint : `${f.scheme}://${f.endpoint}`;
      // The endpoint names its scheme; the scheme alone differs only on one endpoint.
      if (a.endpoint.toLowerCase() !== b.endpoint.toLowerCase()) {
        add('endpoint', 'endpoint', withScheme(a), withScheme(b));
      } else {
        add('scheme', 'scheme', a.scheme, b.scheme);
      }
      // The region is in the URL only on AWS's own endpoints.
      if (a.region !== undefined && b.region !== undefined) add('region', 'region', a.region, b.region);
      add('hostStyle', 'host style', a.hostStyle, b.hostStyle);
      add('account', 'storage account', a.account, b.account);
    }
    add('bucket', 'bucket', a.bucket, b.bucket);
    add('container', 'container', a.container, b.container);
    if (a.key !== b.key) {
      reasons.push({ code: 'key', message: `key: preheat ${show(a.key)}, plugin ${show(b.key)}` });
    }
  } else {
    const a = new URL(preheat.url);
    const b = new URL(plugin.url);
    add('scheme', 'scheme', a.protocol.replace(/:$/, ''), b.protocol.replace(/:$/, ''));
    add('host', 'host', a.host, b.host);
    add('path', 'path', a.pathname, b.pathname);
  }
  if (reasons.length === 0) {
    reasons.push({
      code: 'url',
      message: `object URL: preheat ${stripQuery(preheat.url)}, plugin ${stripQuery(plugin.url)}`,
    });
  }
  return reasons;
}

/**
 * What the query of each (signed) URL says after the side's filter: filters that differ, signature or credential
 * parameters left unfiltered (the side's id is then `unstable`: it changes with each signing) and parameters that
 * differ or are in one URL only.
 */
function queryReasons(
  preheat: Side,
  plugin: Side,
  symbolic: Record<SideName, string>,
): { reasons: Reason[]; unstable: Record<SideName, boolean> } {
  const sides: [SideName, Side][] = [
    ['preheat', preheat],
    ['plugin', plugin],
  ];
  const reasons: Reason[] = [];
  const kept = {
    preheat: keptQuery(symbolic.preheat, preheat.filter, preheat.rule),
    plugin: keptQuery(symbolic.plugin, plugin.filter, plugin.rule),
  };
  const carried = new Set([...queryNames(symbolic.preheat), ...queryNames(symbolic.plugin)]);
  const onlyIn = (a: string[], b: string[]) => a.filter((n) => !b.includes(n) && carried.has(n));
  const onlyPreheat = onlyIn(preheat.filter, plugin.filter);
  const onlyPlugin = onlyIn(plugin.filter, preheat.filter);
  if (onlyPreheat.length > 0 || onlyPlugin.length > 0) {
    const parts = [];
    if (onlyPreheat.length > 0) parts.push(`only the preheat filters ${onlyPreheat.join(', ')}`);
    if (onlyPlugin.length > 0) parts.push(`only the plugin filters ${onlyPlugin.join(', ')}`);
    reasons.push({
      code: 'filter',
      message: `different filter (preheat: ${preheat.filterSource}; plugin: ${plugin.filterSource}): ${parts.join('; ')}`,
    });
  }
  const unstable = { preheat: false, plugin: false };
  for (const [who, side] of sides) {
    for (const [name, values] of kept[who]) {
      const v = variation(side, name, values);
      if (v === 'signing' || v === 'session') {
        unstable[who] = true;
        reasons.push({
          code: 'unfilteredSignature',
          message: `${who}: signature parameter ${name} is not filtered: the task id changes with every ${v === 'session' ? 'session token' : 'signing'}`,
        });
      } else if (v === 'credential') {
        unstable[who] = true;
        reasons.push({
          code: 'unfilteredCredential',
          message: `${who}: signature parameter ${name} is not filtered: the task id depends on the access key (it changes when the key is rotated, and the preheat's key is in a Secret)`,
        });
      }
    }
  }
  for (const [who, side] of sides) {
    const other: SideName = who === 'preheat' ? 'plugin' : 'preheat';
    for (const [name, values] of kept[who]) {
      const theirs = kept[other].get(name);
      const v = variation(side, name, values);
      if (v === 'signing' || v === 'session' || v === 'credential') continue; // reported above
      if (theirs === undefined) {
        // Filtered by the other side: the filter reason says it; else the other URL does not carry it.
        if (!queryNames(symbolic[other]).has(name)) {
          reasons.push({ code: 'query', message: `query parameter ${name} only in the ${who} URL` });
        }
      } else if (who === 'preheat' && theirs.join('\u0000') !== values.join('\u0000')) {
        reasons.push({
          code: 'query',
          message:
            v === 'expiry'
              ? `${name} is not filtered and the URLs are valid for different times: preheat ${values.join(',')} s, plugin ${theirs.join(',')} s`
              : `query parameter ${name} differs between the preheat and the plugin URL`,
        });
      }
    }
  }

  return { reasons, unstable };
}

/** Compares the two sides of a pair. */
export function comparePair(label: string, source: string, preheat: Side, plugin: Side): CheckResult {
  const symbolic = { preheat: symbolicURL(preheat, 'preheat'), plugin: symbolicURL(plugin, 'plugin') };
  const reasons: Reason[] = [];

  // 1. The object URL itself.
  if (new URL(stripQuery(preheat.url)).href !== new URL(stripQuery(plugin.url)).href) {
    reasons.push(...urlReasons(preheat, plugin));
  }

  // 2. The query: what each side keeps of its (signed) URL after its filter.
  const query = queryReasons(preheat, plugin, symbolic);
  reasons.push(...query.reasons);
  const unstable = query.unstable;

  // 3. The other parts of the task id.
  const part = (
    code: string,
    what: string,
    a: string | number | undefined,
    b: string | number | undefined,
  ) => {
    if (a !== b) reasons.push({ code, message: `${what}: preheat ${show(a)}, plugin ${show(b)}` });
  };
  part('tag', 'tag', preheat.tag, plugin.tag);
  part('application', 'application', preheat.application, plugin.application);
  part('pieceLength', 'piece length', preheat.pieceLength, plugin.pieceLength);

  const idOf = (who: SideName, side: Side) =>
    unstable[who]
      ? undefined
      : taskID({
          url: symbolic[who],
          filter: side.filter,
          tag: side.tag,
          application: side.application,
          pieceLength: side.pieceLength,
          rule: side.rule,
        });
  const ids = { preheat: idOf('preheat', preheat), plugin: idOf('plugin', plugin) };
  if (preheat.rule !== plugin.rule && ids.preheat !== ids.plugin) {
    reasons.push({
      code: 'daemonVersion',
      message: `different peer daemon versions: the preheat's ids follow the ${preheat.rule} rule (${preheat.ruleSource}), the plugin's the ${plugin.rule} rule (${plugin.ruleSource}); daemons of both versions compute different ids for this URL`,
    });
  }
  const report = (who: SideName, side: Side): SideReport => ({
    url: who === 'preheat' && !side.signer ? redact(side.url) : side.url,
    filter: side.filter,
    filterSource: side.filterSource,
    tag: side.tag,
    application: side.application,
    pieceLength: side.pieceLength,
    taskID: ids[who],
    rule: side.rule,
  });
  const ok = reasons.length === 0 && ids.preheat !== undefined && ids.preheat === ids.plugin;
  if (!ok && reasons.length === 0) {
    // Not expected: every way two ids can differ is named above. Never report a miss without a reason.
    reasons.push({ code: 'taskID', message: 'the task ids differ' });
  }
  return {
    status: ok ? 'OK' : 'MISS',
    label,
    source,
    taskID: ok ? ids.preheat : undefined,
    preheat: report('preheat', preheat),
    plugin: report('plugin', plugin),
    reasons: ok ? [] : reasons,
  };
}
