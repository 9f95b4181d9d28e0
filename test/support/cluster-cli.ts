/**
 * The real cluster (cluster.ts) for a human debugging it:
 *   node test/support/cluster-cli.ts start   starts it, prints the kubeconfig and the log directory, and keeps it
 *                                            running until Ctrl-C (then stops it)
 *   node test/support/cluster-cli.ts stop    stops every cluster left on the machine (by its directory's state)
 */
import { clusterDirs, startCluster, stopClusterDir } from './cluster.ts';

const command = process.argv[2];
if (command === 'start') {
  const cluster = await startCluster({
    log: (l) => console.log(l),
    keepDir: process.argv.includes('--keep-dir'),
  });
  console.log(`export KUBECONFIG=${cluster.kubeconfigPath}`);
  console.log(`kubectl: ${cluster.assets.bin}/kubectl; logs: ${cluster.logDir}; Ctrl-C stops the cluster`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    const t0 = Date.now();
    void cluster
      .stop()
      .then(() => console.log(`[cluster] stopped in ${((Date.now() - t0) / 1000).toFixed(1)} s`));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
} else if (command === 'stop') {
  for (const dir of clusterDirs()) {
    console.log(`[cluster] stopping the cluster of ${dir}`);
    await stopClusterDir(dir);
  }
} else {
  console.error('usage: node test/support/cluster-cli.ts start [--keep-dir] | stop');
  process.exit(2);
}
