package io.peerload.plugin;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * Where the configuration lives (seed 2.2: {@code P2P_ENDPOINT_CONFIG}, else {@code /etc/p2p-endpoint/config.json}
 * on Linux and {@code ~/.p2p-endpoint/config.json} on macOS), and the current parsed configuration.
 *
 * <p>The file is small, so it is read on every request and parsed again only when its bytes changed (no reliance
 * on modification times, which Kubernetes' symlink swaps of Secret volumes and coarse file systems make
 * unreliable). Files it points to (a GCS service account) are re-read at most {@link #REFRESH_MILLIS} later. Keys
 * can therefore be rotated without restarting the model server.
 */
public final class ConfigSource {
  public static final String ENV = "P2P_ENDPOINT_CONFIG";
  static final long REFRESH_MILLIS = 30_000;

  private final Path path;
  private final LongSupplier clock;
  private byte[] lastBytes;
  private long parsedAt;
  private PluginConfig config;
  private ConfigException error;

  public ConfigSource(Path path) {
    this(path, System::currentTimeMillis);
  }

  ConfigSource(Path path, LongSupplier clock) {
    this.path = path;
    this.clock = clock;
  }

  public Path path() {
    return path;
  }

  /** Resolves the configuration path from the environment and the OS, as seed 2.2 says. */
  public static Path resolvePath(Map<String, String> env, String osName, String userHome) {
    String fromEnv = env.get(ENV);
    if (fromEnv != null && !fromEnv.trim().isEmpty()) {
      return Paths.get(fromEnv.trim());
    }
    String os = osName == null ? "" : osName.toLowerCase(Locale.ROOT);
    if (os.contains("mac") || os.contains("darwin")) {
      return Paths.get(userHome, ".p2p-endpoint", "config.json");
    }
    return Paths.get("/etc/p2p-endpoint/config.json");
  }

  public static ConfigSource fromEnvironment() {
    return new ConfigSource(
        resolvePath(System.getenv(), System.getProperty("os.name"), System.getProperty("user.home")));
  }

  /** The current configuration; throws the reason when the file is missing or invalid. */
  public synchronized PluginConfig current() throws ConfigException {
    byte[] bytes;
    try {
      bytes = Files.readAllBytes(path);
    } catch (NoSuchFileException e) {
      lastBytes = null;
      config = null;
      throw new ConfigException("configuration file " + path + " not found (set " + ENV + " to its path)");
    } catch (IOException e) {
      lastBytes = null;
      config = null;
      throw new ConfigException(
          "cannot read configuration file " + path + " (" + e.getClass().getSimpleName() + ")", e);
    }
    long now = clock.getAsLong();
    if (!Arrays.equals(bytes, lastBytes) || now - parsedAt >= REFRESH_MILLIS) {
      lastBytes = bytes;
      parsedAt = now;
      try {
        Path dir = path.toAbsolutePath().getParent();
        config =
            PluginConfig.parse(
                new String(bytes, StandardCharsets.UTF_8), path.toString(), dir == null ? Paths.get(".") : dir);
        error = null;
      } catch (ConfigException e) {
        config = null;
        error = e;
      }
    }
    if (error != null) {
      throw error;
    }
    return config;
  }
}
