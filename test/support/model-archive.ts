/**
 * Tiny TorchServe model archives (.mar) for e2e tests, built with the real `torch-model-archiver` of the TorchServe
 * virtualenv. The model is a custom handler that imports torch and has no weights file: it scores an uploaded file
 * against three labels (a softmax over a few byte statistics, deterministic) and answers a JSON object mapping label
 * to score, highest first, as TorchServe's classification handlers answer.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { torchServeBinDir } from './torchserve.ts';

const run = promisify(execFile);

export const LABELS = ['cat', 'dog', 'bird'] as const;

const HANDLER = `
import json

import torch


class TinyClassifier:
    """Scores the bytes of an uploaded file against three labels; answers {label: score}, highest first."""

    labels = ${JSON.stringify(LABELS)}

    def __init__(self):
        self.initialized = False

    def initialize(self, context):
        # A fixed "weight" matrix: 3 labels x 3 features.
        self.weights = torch.tensor([[1.0, -0.5, 0.2], [-0.3, 1.0, 0.1], [0.2, 0.3, -1.0]])
        self.initialized = True

    def _features(self, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        t = torch.tensor(list(bytes(data)) or [0], dtype=torch.float32) / 255.0
        return torch.stack([t.mean(), t.std(unbiased=False), (t > 0.5).float().mean()])

    def handle(self, data, context):
        out = []
        for row in data:
            body = row.get("data") or row.get("body") or b""
            scores = torch.softmax(self.weights @ self._features(body), dim=0).tolist()
            ranked = sorted(zip(self.labels, scores), key=lambda p: p[1], reverse=True)
            out.append({label: round(score, 6) for label, score in ranked})
        return out


_service = TinyClassifier()


def handle(data, context):
    if not _service.initialized:
        _service.initialize(context)
    if data is None:
        return None
    return _service.handle(data, context)
`;

export interface ModelArchive {
  /** Path of the .mar file. */
  path: string;
  modelName: string;
  version: string;
}

/**
 * Builds `<dir>/<modelName>.mar` with torch-model-archiver; `handler` replaces the tiny classifier's source (a test
 * that needs answers of its own, or a handler that fails).
 */
export async function buildModelArchive(
  dir: string,
  opts: { modelName?: string; version?: string; handler?: string } = {},
): Promise<ModelArchive> {
  const bin = await torchServeBinDir();
  const modelName = opts.modelName ?? 'tiny';
  const version = opts.version ?? '1.0';
  const work = await mkdtemp(join(tmpdir(), 'peerload-mar-'));
  try {
    const handler = join(work, 'tiny_handler.py');
    await writeFile(handler, opts.handler ?? HANDLER);
    await run(
      join(bin, 'torch-model-archiver'),
      [
        '--model-name',
        modelName,
        '--version',
        version,
        '--handler',
        handler,
        '--export-path',
        dir,
        '--force',
      ],
      { timeout: 120_000 },
    );
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return { path: join(dir, `${modelName}.mar`), modelName, version };
}

/**
 * A valid but large archive: the entries of `base` (manifest renamed to `modelName`) plus `sizeBytes` of random,
 * incompressible data stored uncompressed. Written by streaming, never held in memory.
 */
export async function buildLargeModelArchive(
  base: ModelArchive,
  dir: string,
  modelName: string,
  sizeBytes: number,
): Promise<ModelArchive> {
  const bin = await torchServeBinDir();
  const out = join(dir, `${modelName}.mar`);
  const script = `
import json, os, sys, zipfile
src, dst, name, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED, allowZip64=True) as zout:
    for info in zin.infolist():
        data = zin.read(info.filename)
        if info.filename == "MAR-INF/MANIFEST.json":
            m = json.loads(data)
            m["model"]["modelName"] = name
            data = json.dumps(m, indent=4).encode()
        zout.writestr(info.filename, data)
    with zout.open("payload.bin", "w", force_zip64=True) as f:
        left = size
        while left > 0:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n
`;
  await run(join(bin, 'python'), ['-c', script, base.path, out, modelName, String(sizeBytes)], {
    timeout: 600_000,
  });
  return { path: out, modelName, version: base.version };
}
