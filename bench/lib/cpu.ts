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

/** The machine's CPU time so far (`/proc/stat`'s first line), in ticks: busy (everything but idle and iowait), all. */
export function machineTicks(): { busy: number; total: number } {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  const total = f.slice(0, 8).reduce((s, v) => s + v, 0);
  return { busy: total - f[3]! - f[4]!, total };
}

/** How many of the machine's cores were busy on average since `before` (0 to the number of cores). */
export function coresBusySince(before: { busy: number; total: number }, cores: number): number {
  const now = machineTicks();
  return ((now.busy - before.busy) / (now.total - before.total)) * cores;
}
