/** One registration through the plugin, as scenarios 3 and 6 time it. */
import type { HeapGrowth } from '../../test/support/jvm-heap.ts';

export interface PluginRun {
  /** POST → archive in the model store (the download), ms. */
  downloadMs: number;
  /** POST → answer (download + TorchServe's registration), ms. */
  totalMs: number;
  cacheHit: boolean | undefined;
  /** The plugin's LocalHit: the daemon said the task was served from its own cache. */
  localHit?: boolean | undefined;
  /** The plugin's HardLink: the archive is a hard link of the daemon's file (only with hard_link_dir). */
  hardLink?: boolean | undefined;
  taskID?: string | undefined;
  heap?: HeapGrowth;
}
