package io.peerload.plugin;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Whether a hard link of the peer daemon's cached file may be registered as an archive: only when this process
 * (TorchServe, and the model handlers it runs) can neither write that file nor make it writable. A hard link IS the
 * daemon's file: a handler writing to it would change what the daemon serves to every other peer.
 *
 * <p>The daemon cannot be asked for a read-only link: dragonfly-client 1.4.2 creates it with {@code link(2)} and
 * nothing else (no header or setting for its mode), and the inode keeps the mode the daemon created its file with
 * (0666 less its umask: 0644 with the usual 022). Making the file read-only from here ({@code chmod a-w}) would
 * change the daemon's own cache file, and it would guarantee nothing: only the file's owner or a process with
 * CAP_FOWNER can do it, and either can make it writable again. So the plugin does not change the file and uses the
 * link only when the file is safe from this process as it is, and streams the archive otherwise:
 * <ul>
 *   <li>no CAP_DAC_OVERRIDE (root writes any file whatever its mode), CAP_FOWNER (chmod any file) or CAP_CHOWN
 *       (take the file, then chmod it) among the effective capabilities;
 *   <li>not the file's owner (the owner may chmod it);
 *   <li>no write access by mode or ACL ({@code access(2)}: the group or others write bits, as they apply).
 * </ul>
 * That is TorchServe running as a non-root user other than the daemon's, as the restricted Pod Security level
 * has it, with the daemon's usual umask. Where {@code /proc/self/status} cannot be read, nothing is guaranteed.
 */
final class ReadOnlyLink {
  /** Why this process could write {@code link} (or make it writable), or null when it cannot. */
  interface Check {
    String problem(Path link);
  }

  static final long CAP_CHOWN = 1L;
  static final long CAP_DAC_OVERRIDE = 1L << 1;
  static final long CAP_FOWNER = 1L << 3;

  /** The check of this process, from {@code /proc/self/status}. */
  static final Check PROCESS = link -> problem(Identity.current(), link);

  private ReadOnlyLink() {}

  /** The file-system identity of a process: its file-system uid and effective capabilities. */
  static final class Identity {
    final long fsUid;
    final long capEff;
    /** Why the identity is unknown (then nothing is guaranteed), or null. */
    final String unknown;

    Identity(long fsUid, long capEff, String unknown) {
      this.fsUid = fsUid;
      this.capEff = capEff;
      this.unknown = unknown;
    }

    private static final Pattern UID = Pattern.compile("(?m)^Uid:\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s*$");
    private static final Pattern CAP_EFF = Pattern.compile("(?m)^CapEff:\\s+([0-9a-fA-F]{1,16})\\s*$");

    /** From the text of {@code /proc/<pid>/status}: the fourth uid (the one file access uses) and CapEff. */
    static Identity parse(String status) {
      Matcher uid = UID.matcher(status);
      Matcher cap = CAP_EFF.matcher(status);
      if (!uid.find() || !cap.find()) {
        return new Identity(-1, -1, "/proc/self/status has no Uid or CapEff line");
      }
      return new Identity(Long.parseLong(uid.group(4)), Long.parseUnsignedLong(cap.group(1), 16), null);
    }

    static Identity current() {
      try {
        return parse(new String(Files.readAllBytes(Paths.get("/proc/self/status")), StandardCharsets.UTF_8));
      } catch (IOException | RuntimeException e) {
        return new Identity(-1, -1, "cannot read /proc/self/status (" + e.getClass().getSimpleName() + ")");
      }
    }
  }

  /** {@link Check#problem} for {@code me}, from the link's owner and {@code access(2)}. */
  static String problem(Identity me, Path link) {
    long owner;
    String mode;
    try {
      owner = ((Number) Files.getAttribute(link, "unix:uid", LinkOption.NOFOLLOW_LINKS)).longValue();
      mode = PosixFilePermissions.toString(Files.getPosixFilePermissions(link, LinkOption.NOFOLLOW_LINKS));
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
      return "cannot tell who may write the peer daemon's file (" + e.getClass().getSimpleName() + ")";
    }
    return problem(me, owner, mode, Files.isWritable(link));
  }

  /** The rule itself: {@code writable} is {@code access(2)}'s answer for this process. */
  static String problem(Identity me, long ownerUid, String mode, boolean writable) {
    String advice = "; run the model server as a non-root user other than the peer daemon's to use hard links";
    if (me.unknown != null) {
      return "cannot tell whether the model server could write the peer daemon's file: " + me.unknown;
    }
    long caps = me.capEff & (CAP_CHOWN | CAP_DAC_OVERRIDE | CAP_FOWNER);
    if (caps != 0) {
      return "the model server runs with " + capNames(caps) + " (as root does): through the link it could write "
          + "the peer daemon's cache file" + advice;
    }
    if (me.fsUid == ownerUid) {
      return "the model server runs as uid " + ownerUid + ", the owner of the peer daemon's file: it could make "
          + "that file writable" + advice;
    }
    if (writable) {
      return "the peer daemon's file (" + mode + ") is writable by the model server's user: give the daemon a "
          + "umask without group and others write (022)";
    }
    return null;
  }

  private static String capNames(long caps) {
    StringBuilder b = new StringBuilder();
    if ((caps & CAP_DAC_OVERRIDE) != 0) {
      b.append("CAP_DAC_OVERRIDE");
    }
    if ((caps & CAP_FOWNER) != 0) {
      b.append(b.length() == 0 ? "" : ", ").append("CAP_FOWNER");
    }
    if ((caps & CAP_CHOWN) != 0) {
      b.append(b.length() == 0 ? "" : ", ").append("CAP_CHOWN");
    }
    return b.toString();
  }
}
