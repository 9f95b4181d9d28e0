/**
 * Whether a hard link of the peer daemon's cached file may stay in the model root: only when the model server can
 * neither write that file nor make it writable. A hard link IS the daemon's file (one inode): a server writing its
 * model file through it would change what the daemon serves to every other peer.
 *
 * The TorchServe plugin runs inside the server and asks the kernel about itself; the agent is another container, so
 * the server's uid comes from the pod spec (`--server-uid`, the server container's runAsUser), and the rule is
 * decided on the file's owner and mode:
 *   - no uid known, or uid 0: the file is copied (root writes any file whatever its mode, unless every capability
 *     is dropped, which the agent cannot see);
 *   - the server's uid owns the file: copied (the owner may chmod it);
 *   - the group or others may write it (mode & 022): copied. With a POSIX ACL the group bits are the ACL's mask, so
 *     this also rules out any named user or group entry; and it needs no gid: whatever the server's groups
 *     (fsGroup, supplementary groups), nobody but the owner and a privileged process writes a file without them;
 *   - others may not read it (mode & 004): copied, or the server could not load it.
 * That is a non-root server with all capabilities dropped (the restricted Pod Security level) beside a daemon
 * with its usual umask (022: files 0644 of its own user). The daemon cannot be asked for a read-only link (client
 * 1.4.2 makes it with link(2) and nothing else), and changing the mode of its file here would change its cache.
 *
 * The alternative, copying every file, is what happens whenever this rule says no: a hard link saves the copy's
 * disk and time (the daemon's copy is the only one on the node) and is kept where it is safe.
 */
import type { Stats } from 'node:fs';

/** Why the agent will not ask for links at all with this server uid, or undefined when it may. */
export function serverProblem(serverUid: number | undefined): string | undefined {
  const advice =
    "run the model server as a non-root user (runAsUser) other than the peer daemon's, and pass that uid as --server-uid, to use hard links";
  if (serverUid === undefined)
    return `the model server's uid is not known, so a hard link of the daemon's file could be writable by it: ${advice}`;
  if (serverUid === 0)
    return `the model server runs as root, which writes any file: through a hard link it could change the daemon's file; ${advice}`;
  return undefined;
}

/** Why the model server (uid `serverUid`) could write the linked file `st` or not read it, or undefined. */
export function linkProblem(
  serverUid: number | undefined,
  st: Pick<Stats, 'uid' | 'mode'>,
): string | undefined {
  const server = serverProblem(serverUid);
  if (server) return server;
  const mode = (st.mode & 0o777).toString(8).padStart(3, '0');
  if (st.uid === serverUid)
    return `the model server runs as uid ${serverUid}, the owner of the peer daemon's file: it could make that file writable; run the daemon as another user`;
  if ((st.mode & 0o022) !== 0)
    return `the peer daemon's file (mode ${mode}) is writable by its group or others: give the daemon a umask without group and others write (022)`;
  if ((st.mode & 0o004) === 0)
    return `the peer daemon's file (mode ${mode}) is not readable by others, so the model server could not read it: give the daemon the umask 022`;
  return undefined;
}
