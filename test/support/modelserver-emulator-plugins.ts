/**
 * The model-server emulator's endpoint plugins: `p2p` (peerload's) and `dragonfly` (the third-party one), each a
 * download of the object (through the peer proxy when configured) followed by a registration. A layer of the
 * emulator's instance class, on top of its registrations.
 */
import { Agent as HttpAgent, request } from 'node:http';
import { DEFAULT_FILTERS } from '../../src/storage/objecturl.ts';
import { HttpError, type Reply } from './modelserver-emulator-http.ts';
import { EmulatorModels, type Registration } from './modelserver-emulator-management.ts';
import type { DownloadRecord } from './modelserver-emulator-types.ts';

const downloadAgent = new HttpAgent({ keepAlive: true, maxSockets: 16 });

export abstract class EmulatorPlugins extends EmulatorModels {
  downloads: DownloadRecord[] = [];
  /** p2p plugin: object keys being downloaded + registered, and since when. */
  private readonly pluginInFlight = new Map<string, number>();

  /** peerload's plugin: valid JSON always, `Status` + TorchServe's error fields, meaningful statuses. */
  protected async handleP2PPlugin(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const fail = (
      status: number,
      type: string,
      message: string,
      headers?: Record<string, string>,
    ): Reply => ({
      status,
      json: { code: status, type, message, Status: message },
      ...(headers ? { headers } : {}),
    });
    if (url.searchParams.has('url')) {
      return fail(
        400,
        'BadRequestException',
        'Parameter url is not supported by this endpoint: use file_name.',
      );
    }
    const r = this.parseRegistration(url, 'file_name');
    if (r.fileName === '') return fail(400, 'BadRequestException', 'Parameter file_name is required.');
    if (r.fileName.startsWith('/') || `/${r.fileName}/`.includes('/../')) {
      return fail(400, 'BadRequestException', `Invalid file_name: ${r.fileName}`);
    }
    // As the plugin: one download per object key; a POST for a key in flight starts nothing and answers 202
    // DownloadInProgress (README). The download goes on when the client that started it goes away.
    const started = this.pluginInFlight.get(r.fileName);
    if (started !== undefined) {
      this.stats.inProgressAnswers++;
      const message = `Download of ${r.fileName} in progress since ${new Date(started).toISOString()}`;
      return { status: 202, json: { code: 202, type: 'DownloadInProgress', message, Status: message } };
    }
    this.stats.pluginRegistrationsStarted++;
    this.pluginInFlight.set(r.fileName, this.now());
    try {
      return await this.downloadAndRegister(r, fail);
    } finally {
      this.pluginInFlight.delete(r.fileName);
    }
  }

  private async downloadAndRegister(
    r: Registration,
    fail: (status: number, type: string, message: string, headers?: Record<string, string>) => Reply,
  ): Promise<Reply> {
    const dl = await this.download(r.fileName);
    if (dl && dl.status === 404)
      return fail(404, 'ModelNotFoundException', `Object not found: ${r.fileName}`);
    if (dl && dl.status !== 200) {
      return fail(
        502,
        'DownloadArchiveException',
        `Download of ${r.fileName} failed: ${dl.error ?? `HTTP ${dl.status}`}`,
        {
          'X-Dragonfly-Error-Type': dl.errorType ?? 'proxy',
        },
      );
    }
    try {
      const out = await this.register(r);
      return {
        status: out.status,
        json: {
          Status: out.message,
          // As the plugin: the daemon marks only a local hit, so CacheHit is never false (a remote hit and a miss
          // look the same) and LocalHit says what is known once the download went through P2P.
          ...(dl?.taskID !== undefined ? { TaskID: dl.taskID, LocalHit: dl.cacheHit } : {}),
          ...(dl?.cacheHit ? { CacheHit: true } : {}),
        },
      };
    } catch (e) {
      if (e instanceof HttpError) return fail(e.status, e.type, e.message);
      throw e;
    }
  }

  /**
   * dragonfly-endpoint (2023): `String.format("{\n\t\"Status\": \"%s\"\n}\n", message)` with the response left at
   * HTTP 200 and no content type on failures; on 0.12 its 11-parameter handleRegister call is a NoSuchMethodError.
   */
  protected async handleLegacyPlugin(url: URL): Promise<Reply> {
    this.stats.registrationAttempts++;
    const legacy = (status: number, message: string): Reply => ({
      status,
      raw: `{\n\t"Status": "${message}"\n}\n`,
      contentType: null,
    });
    const r = this.parseRegistration(url, 'file_name');
    if (r.fileName === '') return legacy(200, 'fileName is required.');
    const dl = await this.download(r.fileName);
    if (dl && dl.status !== 200) {
      return legacy(200, `Failed to download model file "${r.fileName}": ${dl.error ?? `HTTP ${dl.status}`}`);
    }
    if (this.opts.legacyPluginSignatureMismatch) {
      throw new HttpError(
        500,
        'NoSuchMethodError',
        "'org.pytorch.serve.http.StatusResponse org.pytorch.serve.util.ApiUtils.handleRegister(java.lang.String, java.lang.String, org.pytorch.serve.archive.model.Manifest$RuntimeType, java.lang.String, int, int, int, int, boolean, boolean, boolean)'",
      );
    }
    try {
      const out = await this.register(r);
      return legacy(out.status, out.message);
    } catch (e) {
      if (e instanceof HttpError) return legacy(200, e.message);
      throw e;
    }
  }

  /** GET through the peer proxy (or direct). Undefined when no objectURL is configured. */
  private async download(
    fileName: string,
  ): Promise<
    { status: number; taskID?: string; cacheHit: boolean; error?: string; errorType?: string } | undefined
  > {
    if (!this.opts.objectURL) return undefined;
    const target = new URL(this.opts.objectURL(fileName));
    const filter = this.opts.filter ?? [...DEFAULT_FILTERS.s3];
    // As the plugin: through P2P whatever the daemon's proxy.rules.
    const headers: Record<string, string> = { ...this.opts.headers, 'X-Dragonfly-Use-P2P': 'true' };
    if (filter.length > 0) {
      headers['X-Dragonfly-Filtered-Query-Params'] = filter.join(',');
      headers['X-Dragonfly-Filter'] = filter.join('&');
    }
    if (this.opts.tag) headers['X-Dragonfly-Tag'] = this.opts.tag;
    if (this.opts.application) headers['X-Dragonfly-Application'] = this.opts.application;
    const proxy = this.opts.proxyURL ? new URL(this.opts.proxyURL) : undefined;
    if (!proxy && target.protocol !== 'http:')
      throw new Error('the emulator downloads http URLs only (or via proxy)');
    headers['host'] = target.host;
    this.stats.downloads++;
    const record: DownloadRecord = {
      url: target.href,
      viaProxy: proxy !== undefined,
      status: 0,
      bytes: 0,
      cacheHit: false,
    };
    this.downloads.push(record);
    if (this.downloads.length > 1000) this.downloads.shift();
    return new Promise((resolve) => {
      const req = request(
        {
          agent: downloadAgent,
          host: proxy ? proxy.hostname : target.hostname,
          port: proxy ? proxy.port || 80 : target.port || 80,
          // Absolute-form request line for a forward proxy (RFC 9112 3.2.2).
          path: proxy ? target.href : target.pathname + target.search,
          method: 'GET',
          headers,
          timeout: 60_000,
        },
        (res) => {
          record.status = res.statusCode ?? 0;
          const taskID = res.headers['x-dragonfly-task-id'];
          record.taskID = typeof taskID === 'string' ? taskID : undefined;
          record.cacheHit = res.headers['x-dragonfly-task-download-finished'] === 'true';
          res.on('data', (c: Buffer) => {
            record.bytes += c.length;
            this.stats.downloadBytes += c.length;
          });
          res.on('end', () => {
            const errorType = res.headers['x-dragonfly-error-type'];
            resolve({
              status: record.status,
              ...(record.taskID !== undefined ? { taskID: record.taskID } : {}),
              cacheHit: record.cacheHit,
              ...(typeof errorType === 'string' ? { errorType } : {}),
            });
          });
          res.on('error', (e) =>
            resolve({ status: 0, cacheHit: false, error: e.message, errorType: 'proxy' }),
          );
        },
      );
      req.on('timeout', () => req.destroy(new Error('download timed out')));
      req.on('error', (e) => {
        record.status = 0;
        resolve({ status: 0, cacheHit: false, error: e.message, errorType: proxy ? 'proxy' : 'backend' });
      });
      req.end();
    });
  }
}
