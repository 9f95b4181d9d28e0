package io.peerload.plugin;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Set;

/**
 * Which file of the model store holds which object, so that two object keys with the same last segment ({@code
 * a/model.mar}, {@code b/model.mar}) never overwrite each other's archive.
 *
 * <p>Each archive the plugin places has a hidden record next to it ({@code .p2p-object.<file name>}, holding the
 * object: {@code type://bucket/key}). An object's archive is its key's last segment, as before, unless that name
 * already holds another object (or a file the plugin did not place): then it is {@code p2p-<16 hex of the object's
 * SHA-256>-<last segment>}. A distinct name, rather than refusing the second key with a 409, because the usual way
 * to publish a new version is a new prefix with the same file name ({@code v1/model.mar}, {@code v2/model.mar}):
 * the old archive stays in the model store (TorchServe does not remove it on unregister) and is still registered
 * while the new one rolls out, so a refusal would block every such rollout. TorchServe registers the archive under
 * the model name of its manifest (or {@code model_name}), and the name keeps the key's ending ({@code .mar}, {@code
 * .tar.gz}), which is what TorchServe reads the format from; nothing else depends on the file's name.
 *
 * <p>Not thread-safe on its own: the caller serialises {@link #claim} per model store.
 */
final class ArchiveNames {
  static final String RECORD_PREFIX = ".p2p-object.";

  private ArchiveNames() {}

  /**
   * The record of archive {@code name}: {@code .p2p-object.<name>}, or {@code .p2p-object.<SHA-256 of name>} when
   * that would pass the 255 bytes a file name may have (an archive name of 244 bytes or more).
   */
  static Path recordOf(Path store, String name) {
    String plain = RECORD_PREFIX + name;
    return store.resolve(plain.getBytes(StandardCharsets.UTF_8).length <= 255 ? plain
        : RECORD_PREFIX + Crypto.sha256Hex(name));
  }

  /** The name an object gets when its key's last segment already holds something else. */
  static String distinctName(String object, String lastSegment) {
    return "p2p-" + Crypto.sha256Hex(object).substring(0, 16) + "-" + lastSegment;
  }

  /** The archive's file name for {@code object}, and whether the plugin placed it there before (it then exists). */
  static final class Claim {
    final String fileName;
    /** The record was written by this claim: on failure, {@link #release} removes it. */
    final boolean fresh;

    Claim(String fileName, boolean fresh) {
      this.fileName = fileName;
      this.fresh = fresh;
    }
  }

  /**
   * The file name of {@code object} (key {@code key}, last segment {@code lastSegment}) in {@code store}: the one
   * already recorded for it, else the first of the last segment and {@link #distinctName} that holds nothing,
   * recorded for it now. {@code busy} are the names downloads under way hold (their file may not exist yet). A 409
   * naming both objects when neither name is free (another object holds the distinct name too: only a SHA-256
   * prefix collision or a file placed by hand under that name).
   */
  static Claim claim(Path store, String object, String key, String lastSegment, Set<Path> busy)
      throws PluginException {
    String[] names = {lastSegment, distinctName(object, lastSegment)};
    for (String name : names) {
      if (object.equals(owner(store, name))) {
        return new Claim(name, false);
      }
    }
    StringBuilder taken = new StringBuilder();
    for (String name : names) {
      Path file = store.resolve(name);
      String owner = owner(store, name);
      boolean exists = Files.exists(file, LinkOption.NOFOLLOW_LINKS);
      // A record whose file is gone and that no download holds is left over (a removed archive): free.
      if (!exists && !busy.contains(file)) {
        record(store, name, object);
        return new Claim(name, true);
      }
      taken.append(taken.length() == 0 ? "" : "; ").append(name).append(" holds ")
          .append(owner == null ? "a file the plugin did not place" : owner);
    }
    throw PluginException.conflict("file_name " + key + " (" + object + ") cannot be placed in the model store "
        + "without overwriting another object's archive: " + taken + ". Remove the archive that is no longer "
        + "registered from the model store, or give the object another file name");
  }

  /** Undoes a fresh claim whose archive was not placed (or was removed again). */
  static void release(Path store, Claim claim) {
    if (claim.fresh) {
      try {
        Files.deleteIfExists(recordOf(store, claim.fileName));
      } catch (IOException ignored) {
        // a record without its file is reclaimed by the next claim of the name
      }
    }
  }

  /** The object recorded for {@code name}, or null. */
  static String owner(Path store, String name) throws PluginException {
    Path record = recordOf(store, name);
    try {
      return new String(Files.readAllBytes(record), StandardCharsets.UTF_8).trim();
    } catch (NoSuchFileException e) {
      return null;
    } catch (IOException e) {
      throw PluginException.internal("cannot read " + record + ": " + DownloadFailures.reason(e), e);
    }
  }

  private static void record(Path store, String name, String object) throws PluginException {
    Path record = recordOf(store, name);
    try {
      Path tmp = Files.createTempFile(store, ".p2p-", ".part");
      try {
        Files.write(tmp, (object + "\n").getBytes(StandardCharsets.UTF_8));
        ProxyDownloader.placeAtomically(tmp, record);
      } finally {
        Files.deleteIfExists(tmp);
      }
    } catch (IOException e) {
      throw PluginException.internal("cannot write " + record + ": " + DownloadFailures.reason(e), e);
    }
  }
}
