package io.peerload.plugin;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.UUID;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A hard link asked of the peer daemon for one download ({@code hard_link_dir}): with {@code X-Dragonfly-Output-Path}
 * and {@code X-Dragonfly-Force-Hard-Link: true} (the proxy of dragonfly-client 1.4+) the daemon creates {@code
 * daemonPath} (its view of the model store) as a hard link of its cached file, which this process sees as {@code
 * local}. The name is new for every request, so the daemon never finds it taken (it refuses an existing path that is
 * not the same inode). The link replaces the archive only when this process can neither write the daemon's file
 * through it nor make it writable ({@link ReadOnlyLink}), and only once the file is known complete: at once for a
 * task the daemon held, after the whole body for one it downloads now ({@link LinkedBody}); otherwise it is removed
 * and the body streamed as usual.
 */
final class DaemonHardLink {
  // The downloader's logger: everything a download logs stays under one category.
  private static final Logger LOG = LoggerFactory.getLogger(ProxyDownloader.class);
  static final String OUTPUT_PATH_HEADER = "X-Dragonfly-Output-Path";
  static final String FORCE_HARD_LINK_HEADER = "X-Dragonfly-Force-Hard-Link";

  final Path local;
  final String daemonPath;
  private final ReadOnlyLink.Check readOnly;

  DaemonHardLink(Path modelStore, String daemonDir, ReadOnlyLink.Check readOnly) {
    this.readOnly = readOnly;
    String name = ".p2p-" + UUID.randomUUID() + ".link";
    this.local = modelStore.resolve(name);
    this.daemonPath = (daemonDir.endsWith("/") ? daemonDir : daemonDir + "/") + name;
  }

  /** Appends the two request header lines that ask the daemon for the link. */
  void appendHeaders(StringBuilder request) {
    request.append(OUTPUT_PATH_HEADER).append(": ").append(daemonPath).append("\r\n");
    request.append(FORCE_HARD_LINK_HEADER).append(": true\r\n");
  }

  /**
   * Why a non-200 answer is the daemon refusing the link (cross-device link, unwritable directory: an error type of
   * its own, such as 500 {@code dfdaemon}), so that the plain download may still work; null when it is the origin's
   * answer ({@code backend}, or no error type), which is reported as such.
   */
  static String refusal(int status, String errorType) {
    if (errorType != null && !"backend".equalsIgnoreCase(errorType)) {
      return "HTTP " + status + ", " + errorType + " error; the daemon's log says why";
    }
    return null;
  }

  /**
   * Why the daemon's link cannot become the archive, or null when it can: a regular file of the announced size that
   * this process cannot write ({@link ReadOnlyLink}). For a task the daemon held ({@code localHit}) that is at once;
   * for one it is downloading now, only once the body was received whole and matches it ({@link LinkedBody}).
   */
  String problem(Boolean localHit, long expected) {
    String problem = linkedFileProblem(local, localHit, expected);
    return problem != null ? problem : readOnly.problem(local);
  }

  /** Moves the link into place as {@code target}: null when done, else why not (the link is then removed). */
  String moveTo(Path target) {
    try {
      ProxyDownloader.placeAtomically(local, target);
      return null;
    } catch (IOException e) {
      discard();
      return "cannot move the daemon's link to " + target + ": " + DownloadFailures.reason(e);
    }
  }

  /**
   * Why the file at {@code link} cannot be the archive, or null when it can: the daemon made it (a daemon that
   * ignored the header made none; a link to somewhere else than this model store does not show up here), through
   * P2P, as a regular file of the announced size (the daemon allocates a task's file at full size before filling it).
   */
  static String linkedFileProblem(Path link, Boolean localHit, long expected) {
    if (localHit == null) {
      return "the peer proxy did not serve it through P2P";
    }
    if (!Files.isRegularFile(link, LinkOption.NOFOLLOW_LINKS)) {
      return "the daemon made no file at " + link
          + " (a daemon that ignores X-Dragonfly-Output-Path, or hard_link_dir is not this model store)";
    }
    if (expected < 0) {
      return "the peer proxy sent no Content-Length to check the daemon's file against";
    }
    try {
      long size = Files.size(link);
      return size == expected ? null
          : "the daemon's file has " + size + " bytes, the response announced " + expected;
    } catch (IOException e) {
      return "cannot read the size of " + link + ": " + DownloadFailures.reason(e);
    }
  }

  /** Removes the link if the daemon made it; it names the daemon's copy, so removing it never touches that. */
  void discard() {
    try {
      Files.deleteIfExists(local);
    } catch (IOException e) {
      LOG.warn("cannot remove the daemon's link {}: {}", local, DownloadFailures.reason(e));
    }
  }
}
