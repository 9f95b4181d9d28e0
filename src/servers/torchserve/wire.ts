/**
 * The model server's and the endpoint plugins' wire formats (TorchServe's management API and the plugin's answers): zod
 * schemas of the answers, and the readers of the bodies that are not plain JSON (the third-party plugin's
 * hand-formatted `{"Status": "..."}`, TorchServe's error body).
 */
import { z } from 'zod';

export const StatusBody = z.looseObject({ status: z.string() });

const ErrorBody = z.looseObject({
  code: z.number().optional(),
  type: z.string().optional(),
  message: z.string().optional(),
  Status: z.string().optional(),
  status: z.string().optional(),
});

/**
 * The plugin's register answer: `Status`, plus from the peer proxy (p2p) `TaskID`, `LocalHit` (true or false once
 * the download went through P2P, absent otherwise) and `CacheHit` (sent only as true: a plugin that knows no
 * `LocalHit` still marks a hit this way).
 */
const PluginBody = z.looseObject({
  Status: z.string().optional(),
  status: z.string().optional(),
  TaskID: z.string().optional(),
  LocalHit: z.union([z.boolean(), z.string()]).optional(),
  CacheHit: z.union([z.boolean(), z.string()]).optional(),
  type: z.string().optional(),
});

/**
 * The plugin's answer to a POST for an object key it is downloading already (for an earlier request, e.g. of an
 * operator that restarted): HTTP 202 with `{"code": 202, "type": "DownloadInProgress", "message": ...,
 * "Status": ...}`. Nothing new was started; the caller asks again later and gets the registration's outcome
 * (409 once the earlier request registered the model); the README documents it.
 */
export const DOWNLOAD_IN_PROGRESS = 'DownloadInProgress';

const Str = z.union([z.string(), z.number()]).transform(String);

export const WorkerDescription = z.looseObject({
  id: Str.optional(),
  startTime: z.string().optional(),
  /** "READY" or "UNLOADING"; a worker that is still starting shows UNLOADING. */
  status: z.string(),
  memoryUsage: z.number().optional(),
  pid: z.number().optional(),
  gpu: z.boolean().optional(),
  gpuUsage: z.string().optional(),
});
export type WorkerDescription = z.infer<typeof WorkerDescription>;

export const ModelDescription = z.looseObject({
  modelName: z.string(),
  modelVersion: Str,
  modelUrl: z.string().optional(),
  runtime: z.string().optional(),
  minWorkers: z.number(),
  maxWorkers: z.number(),
  batchSize: z.number().optional(),
  maxBatchDelay: z.number().optional(),
  responseTimeout: z.number().optional(),
  startupTimeout: z.number().optional(),
  loadedAtStartup: z.boolean().optional(),
  workers: z
    .array(WorkerDescription)
    .nullish()
    .transform((w) => w ?? []),
  jobQueueStatus: z.looseObject({ remainingCapacity: z.number(), pendingRequests: z.number() }).optional(),
});
export type ModelDescription = z.infer<typeof ModelDescription>;

export const DescribeBody = z.array(ModelDescription);

export const ModelSummary = z.looseObject({ modelName: z.string(), modelUrl: z.string().optional() });
export type ModelSummary = z.infer<typeof ModelSummary>;

export const ListBody = z.looseObject({
  nextPageToken: Str.optional(),
  models: z
    .array(ModelSummary)
    .nullish()
    .transform((m) => m ?? []),
});

/** TorchServe's registration message, as sent by its model API and by both plugins. */
const REGISTERED = /^Model "(.+)" Version: (\S+) registered with (\d+) initial workers\b/;

/** Parses `Model "X" Version: V registered with N initial workers...`; undefined for any other text. */
export function parseRegisteredMessage(
  status: string,
): { modelName: string; version: string; initialWorkers: number } | undefined {
  const m = REGISTERED.exec(status.trim());
  if (!m) return undefined;
  return { modelName: m[1]!, version: m[2]!, initialWorkers: Number(m[3]) };
}

/**
 * The `Status` text of a plugin answer. The third-party plugin formats `{"Status": "%s"}` by hand, so a message
 * holding quotes (its success message does: `Model "X" ...`) is invalid JSON; the text is then taken between
 * the first `"Status": "` and the last `"`.
 */
export function extractPluginStatus(body: string): {
  status?: string;
  validJSON: boolean;
  taskID?: string;
  localHit?: boolean;
  type?: string;
} {
  try {
    const parsed = PluginBody.safeParse(JSON.parse(body));
    if (parsed.success) {
      const d = parsed.data;
      const localHit = flag(d.LocalHit) ?? (flag(d.CacheHit) === true ? true : undefined);
      return {
        validJSON: true,
        ...(d.Status !== undefined || d.status !== undefined ? { status: d.Status ?? d.status } : {}),
        ...(d.TaskID !== undefined ? { taskID: d.TaskID } : {}),
        ...(localHit !== undefined ? { localHit } : {}),
        ...(d.type !== undefined ? { type: d.type } : {}),
      };
    }
    return { validJSON: true };
  } catch {
    const m = /^\s*\{\s*"Status"\s*:\s*"([\s\S]*)"\s*\}\s*$/.exec(body);
    return m ? { validJSON: false, status: m[1]! } : { validJSON: false };
  }
}

/** A JSON boolean the plugin may send as a string; undefined when absent. */
function flag(v: boolean | string | undefined): boolean | undefined {
  return v === undefined ? undefined : v === true || String(v) === 'true';
}

/** The exception type and message of an error answer: TorchServe's `{"code","type","message"}`, a plugin's
 *  `{"Status"}` (hand-formatted or not), or the text itself. */
export function errorFields(body: string): { type?: string; message: string } {
  try {
    const parsed = ErrorBody.safeParse(JSON.parse(body));
    if (parsed.success) {
      const d = parsed.data;
      return {
        ...(d.type !== undefined ? { type: d.type } : {}),
        message: d.message ?? d.Status ?? d.status ?? body.trim(),
      };
    }
  } catch {
    const legacy = extractPluginStatus(body);
    if (legacy.status !== undefined) return { message: legacy.status };
  }
  return { message: body.trim() };
}
