/**
 * buildah, as scripts/lib-image.sh uses it (root, chroot isolation, vfs storage): build the images of the
 * repository and run them the way a kubelet would, without a daemon.
 */
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { REPO_ROOT } from './kube.ts';

const exec = promisify(execFile);
export const BUILDAH = ['--storage-driver', 'vfs'];

export function buildahAvailable(): boolean {
  try {
    execFileSync('buildah', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export async function buildah(...args: string[]): Promise<string> {
  const { stdout } = await exec('buildah', [...BUILDAH, ...args], { maxBuffer: 64 * 1024 * 1024 });
  return stdout.trim();
}

/**
 * scripts/build-image.sh with the Debian-built bases, under the release's default tag (so the image and release
 * tests share one build); returns the reference and the wall time.
 */
export async function buildImage(
  image: 'operator' | 'plugin',
  extra: string[] = [],
): Promise<{ ref: string; seconds: number }> {
  const t0 = Date.now();
  const { stdout } = await exec(
    'bash',
    ['scripts/build-image.sh', '--debian-bases', '--image', image, ...extra],
    { cwd: REPO_ROOT, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, BUILDAH_ISOLATION: 'chroot' } },
  );
  return { ref: stdout.trim().split('\n').pop()!, seconds: (Date.now() - t0) / 1000 };
}
