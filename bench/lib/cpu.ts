/** CPU time a process has used so far (utime + stime of `/proc/<pid>/stat`), in seconds; 0 once it is gone. */
import { readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The fields after the command name (which may hold spaces): utime and stime are fields 14 and 15.
    const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}
