/**
 * The endpoint plugin's register call (`POST /p2p/models?file_name=...`) as data: the query it sends, and what its 2xx answer means. Pure:
 * the client sends and turns a {@link RegisterRejection} into its error.
 *
 * A 2xx is not always a success: the third-party plugin reports every failure as HTTP 200 with
 * `{"Status": "<exception message>"}` (possibly invalid JSON), and only the registration message is one.
 */
import type { ModelServerErrorKind } from './errors.ts';
import type { RegisterRequest, RegisterResult } from './types.ts';
import { DOWNLOAD_IN_PROGRESS, extractPluginStatus, parseRegisteredMessage } from './wire.ts';
import { INVALID_RESPONSE, UNUSABLE_RESPONSE_KIND } from '../../http/classify.ts';

/** Code of a failure the plugin reported inside a 2xx answer. */
export const PLUGIN_FAILURE = 'PLUGIN_FAILURE';

export interface RegisterRejection {
  kind: ModelServerErrorKind;
  serverType?: string | undefined;
  message: string;
  code: typeof PLUGIN_FAILURE | typeof INVALID_RESPONSE;
}

export function registerQuery(req: RegisterRequest): Record<string, string | number | boolean | undefined> {
  return {
    file_name: req.fileName,
    model_name: req.modelName,
    runtime: req.runtime,
    handler: req.handler,
    batch_size: req.batchSize,
    max_batch_delay: req.maxBatchDelay,
    response_timeout: req.responseTimeout,
    startup_timeout: req.startupTimeout,
    initial_workers: req.initialWorkers,
    synchronous: req.synchronous,
  };
}

/** What a 2xx answer to a register call says: the registration, or the failure it carries. */
export function readRegisterAnswer(
  httpStatus: number,
  text: string,
  req: RegisterRequest,
): RegisterResult | RegisterRejection {
  const body = extractPluginStatus(text);
  const extra = {
    ...(body.taskID !== undefined ? { taskID: body.taskID } : {}),
    ...(body.localHit !== undefined ? { localHit: body.localHit } : {}),
  };
  const status = body.status;
  if (httpStatus === 202 && body.type === DOWNLOAD_IN_PROGRESS) {
    return {
      httpStatus: 202,
      status: status ?? 'download in progress',
      workersPending: false,
      inProgress: true,
    };
  }
  if (status !== undefined) {
    const reg = parseRegisteredMessage(status);
    if (reg && (httpStatus === 200 || httpStatus === 201)) {
      return { httpStatus, status, ...reg, workersPending: false, ...extra };
    }
    // initial_workers > 0: TorchServe answers like the scale call (202 async, 206 sync not finished).
    if (httpStatus === 202 || httpStatus === 206) {
      return {
        httpStatus,
        status,
        modelName: reg?.modelName ?? req.modelName,
        version: reg?.version,
        initialWorkers: reg?.initialWorkers ?? req.initialWorkers,
        workersPending: true,
        ...extra,
      };
    }
    return pluginFailure(status);
  }
  return {
    kind: UNUSABLE_RESPONSE_KIND,
    // Not the body: the endpoint may be any address (errors.ts says why).
    message: body.validJSON
      ? 'answer without a Status field'
      : 'answer is neither JSON nor the plugin Status format',
    code: INVALID_RESPONSE,
  };
}

export function isRejection(a: RegisterResult | RegisterRejection): a is RegisterRejection {
  return 'code' in a;
}

/**
 * A 2xx whose Status is not the registration message: the plugin's message is the only clue. A duplicate is a
 * conflict; an absent model is notFound; anything else (mostly download failures) is retryable.
 */
function pluginFailure(status: string): RegisterRejection {
  if (/is already registered for model/.test(status)) {
    return { kind: 'conflict', serverType: 'ConflictStatusException', message: status, code: PLUGIN_FAILURE };
  }
  const kind = /^Model not found\b|does not exist for model/.test(status) ? 'notFound' : 'retryable';
  return { kind, message: status, code: PLUGIN_FAILURE };
}
