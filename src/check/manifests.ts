/** The ModelPreheat and ServedModel manifests, read and turned into the requests each would make. */
import { loadAll, YAMLException } from 'js-yaml';
import type { z } from 'zod';
import { API_VERSION, ModelPreheat, ModelPreheatSpec, ServedModel, parseDuration } from '../api/index.ts';
import { effectiveFilter, objectURL, type StorageLocation } from '../storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, taskIdRule } from '../storage/taskid.ts';
import { CheckInputError, fieldPath, readText } from './input.ts';
import type { PluginSide } from './plugin-side.ts';
import type { Side } from './side.ts';
import { withoutSignature } from './signatures.ts';
import { locationFromURL } from './url-location.ts';

export interface PreheatItem {
  /** The object key (objectStorage, or inferred from a URL). */
  key?: string | undefined;
  side: Side;
  label: string;
}

export interface PreheatDoc {
  name: string;
  namespace: string;
  source: string;
  items: PreheatItem[];
  /** Items already compared with a ServedModel's download. */
  used: Set<PreheatItem>;
}

export interface Documents {
  preheats: PreheatDoc[];
  servedModels: { doc: ServedModel; source: string }[];
  notes: string[];
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => {
      const path = fieldPath(i.path);
      if (i.code === 'unrecognized_keys')
        return `unknown field(s) ${i.keys.map((k) => `${path}.${k}`).join(', ')}`;
      return `${path || '(document)'}: ${i.message}`;
    })
    .join('; ');
}

/** Turns a ModelPreheat spec into the URLs it warms, as the operator would send them. */
export function preheatItems(spec: ModelPreheatSpec, plugin: PluginSide): PreheatItem[] {
  const common = {
    tag: spec.tag,
    application: spec.application,
    pieceLength: spec.pieceLength,
    // The schema's pattern admits only versions taskIdRule reads.
    ...(spec.peerDaemonVersion !== undefined
      ? { rule: taskIdRule(spec.peerDaemonVersion)!, ruleSource: 'spec.peerDaemonVersion' }
      : { rule: plugin.rule, ruleSource: "the plugin's daemon_version" }),
  };
  if (spec.objectStorage) {
    const os = spec.objectStorage;
    const location: StorageLocation = {
      type: os.type,
      bucket: os.bucket,
      container: os.container,
      accountName: os.accountName,
      region: os.region,
      endpoint: os.endpoint,
      pathStyle: os.pathStyle,
      projectID: os.projectID,
    };
    const own = effectiveFilter(os);
    const [filter, filterSource] =
      own.length > 0
        ? [
            own,
            os.filteredQueryParams !== undefined
              ? 'objectStorage.filteredQueryParams'
              : `${os.type} default filter`,
          ]
        : [[...DEFAULT_FILTERED_QUERY_PARAMS], "empty filter: the manager's default"];
    const expiresSeconds = Math.round(parseDuration(os.signedURLExpiry) / 1000);
    // A prefix's files are known only by listing it (with credentials): `--agent-spec` checks a directory.
    return (os.keys ?? []).map((key) => ({
      key,
      label: key,
      side: {
        url: objectURL(location, key),
        // The Secret is not read: a session token is not known, so X-Amz-Security-Token is not assumed.
        signer: { type: os.type, expiresSeconds, sessionToken: false },
        location,
        key,
        filter,
        filterSource,
        ...common,
      },
    }));
  }
  const urls = spec.urls ?? (spec.url !== undefined ? [spec.url] : []);
  const given = spec.filteredQueryParams ?? [];
  const [filter, filterSource] =
    given.length > 0
      ? [given, 'filteredQueryParams']
      : [[...DEFAULT_FILTERED_QUERY_PARAMS], "the manager's default filter"];
  return urls.map((url) => {
    const found = locationFromURL(url, plugin.location);
    return {
      key: found?.key,
      label: withoutSignature(url, filter),
      side: { url, location: found?.location, key: found?.key, filter, filterSource, ...common },
    };
  });
}

const docName = (m: { name: string; namespace?: string | undefined }) =>
  `${m.namespace ?? 'default'}/${m.name}`;

/** The documents of one YAML text, `kind: List` documents expanded. */
function documentsOf(path: string, text: string): unknown[] {
  let docs: unknown[];
  try {
    docs = loadAll(text);
  } catch (err) {
    if (err instanceof YAMLException) {
      // Only the reason and position: the file may also hold a Secret.
      const mark = err.mark ? ` at line ${err.mark.line + 1}, column ${err.mark.column + 1}` : '';
      throw new CheckInputError(`${path}: not valid YAML${mark}: ${err.reason}`);
    }
    throw err;
  }
  return docs.flatMap((d) => {
    const list = d as { kind?: unknown; items?: unknown } | null;
    return typeof list?.kind === 'string' && list.kind.endsWith('List') && Array.isArray(list.items)
      ? list.items
      : [d];
  });
}

/** Adds a ModelPreheat document (`what` names it in errors) to `out`, or a note when it cannot be checked. */
function addPreheat(out: Documents, doc: unknown, what: string, plugin: PluginSide): void {
  const parsed = ModelPreheat.safeParse(doc);
  if (!parsed.success) throw new CheckInputError(`${what}: ${describeIssues(parsed.error)}`);
  const mp = parsed.data;
  const source = `ModelPreheat ${docName(mp.metadata)}`;
  if (mp.spec.type === 'image') {
    out.notes.push(`${source}: type image is not checked (its blobs are known once the manifest is read)`);
    return;
  }
  if (mp.spec.objectStorage?.prefix !== undefined)
    out.notes.push(
      `${source}: a directory (objectStorage.prefix) is not checked from manifests (its files are known by listing): use \`peerload taskid --prefix\` or \`peerload check --agent-spec\``,
    );
  out.preheats.push({
    name: mp.metadata.name,
    namespace: mp.metadata.namespace ?? 'default',
    source,
    items: preheatItems(mp.spec, plugin),
    used: new Set(),
  });
}

/** Adds a ServedModel document to `out`. */
function addServedModel(out: Documents, doc: unknown, what: string): void {
  const parsed = ServedModel.safeParse(doc);
  if (!parsed.success) throw new CheckInputError(`${what}: ${describeIssues(parsed.error)}`);
  const source = `ServedModel ${docName(parsed.data.metadata)}`;
  if (parsed.data.spec.files)
    out.notes.push(
      `${source}: a directory (spec.files) is placed by the agent, not downloaded by the plugin: use \`peerload check --agent-spec\``,
    );
  out.servedModels.push({ doc: parsed.data, source });
}

/**
 * Reads the ModelPreheat and ServedModel documents of `paths` (`-`: stdin) and of `texts` (already read, e.g. from
 * the cluster). `kind: List` documents (`kubectl get -o yaml`) are expanded.
 */
export async function readManifests(
  paths: string[],
  plugin: PluginSide,
  texts: { name: string; text: string }[] = [],
): Promise<Documents> {
  const out: Documents = { preheats: [], servedModels: [], notes: [] };
  const sources = [
    ...(await Promise.all(paths.map(async (p) => ({ name: p, text: await readText(p) })))),
    ...texts,
  ];
  for (const { name: path, text } of sources) {
    documentsOf(path, text).forEach((doc, i) => {
      if (doc === null || doc === undefined) return;
      const where = `${path}: document ${i + 1}`;
      if (typeof doc !== 'object' || Array.isArray(doc))
        throw new CheckInputError(`${where}: not a Kubernetes object`);
      const { kind, apiVersion, metadata } = doc as {
        kind?: unknown;
        apiVersion?: unknown;
        metadata?: unknown;
      };
      if (kind !== 'ModelPreheat' && kind !== 'ServedModel') return; // Secrets, Services...: not ours
      const name = (metadata as { name?: unknown } | undefined)?.name;
      const what = `${where} (${kind}${typeof name === 'string' ? ` ${name}` : ''})`;
      if (apiVersion !== API_VERSION) {
        throw new CheckInputError(`${what}: apiVersion must be ${API_VERSION}`);
      }
      if (kind === 'ModelPreheat') addPreheat(out, doc, what, plugin);
      else addServedModel(out, doc, what);
    });
  }
  if (out.preheats.length === 0 && out.servedModels.length === 0 && out.notes.length === 0) {
    throw new CheckInputError(`no ModelPreheat or ServedModel in ${paths.join(', ')}`);
  }
  return out;
}
