package io.peerload.plugin;

import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.time.Clock;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code POST /p2p/models?file_name=...}: validate, download through the peer proxy, register. Independent of the
 * SDK's request and response types so it is tested without a model server.
 *
 * <p>One download per archive at a time: a POST for an archive (its file in the model store) that another request
 * is downloading and registering starts nothing and answers 202 {@link Json#inProgress}; a request removes an
 * archive only when it created it, under that exclusion, so the loser of a race never deletes what the winner
 * registered. Two objects never share an archive file: {@link ArchiveNames} gives the second of two keys with the
 * same last segment a distinct name.
 */
public final class ModelRegistration {
  private static final Logger LOG = LoggerFactory.getLogger(ModelRegistration.class);

  static final Set<String> PARAMS =
      new HashSet<>(
          Arrays.asList(
              "file_name",
              "model_name",
              "runtime",
              "handler",
              "batch_size",
              "max_batch_delay",
              "response_timeout",
              "startup_timeout",
              "initial_workers",
              "synchronous"));
  private static final Pattern MODEL_NAME = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_.-]{0,127}");

  /** The outcome: HTTP status and JSON body. */
  public static final class Outcome {
    public final int status;
    public final String body;

    Outcome(int status, String body) {
      this.status = status;
      this.body = body;
    }
  }

  /** Registration through the frontend; an interface so tests can stand in for TorchServe. */
  public interface Registry {
    Registrar.Result register(Registrar.Request request) throws PluginException;
  }

  private final ConfigSource configs;
  private final ProxyDownloader downloader;
  private final Registry registry;
  private final Clock clock;
  /** Archives being downloaded + registered, with what the answer to a concurrent POST says about them. */
  private final ConcurrentHashMap<Path, String> inFlight = new ConcurrentHashMap<>();
  /** Serialises the choice of an archive's name with the in-flight check (a few small file operations). */
  private final Object names = new Object();

  public ModelRegistration(ConfigSource configs, ProxyDownloader downloader, Registry registry, Clock clock) {
    this.configs = configs;
    this.downloader = downloader;
    this.registry = registry;
    this.clock = clock;
  }

  /** Handles one request; never throws. */
  public Outcome handle(Map<String, List<String>> params, String modelStore) {
    try {
      return run(params, modelStore);
    } catch (PluginException e) {
      if (e.status() >= 500) {
        LOG.warn("p2p registration failed ({}): {}", e.status(), e.getMessage());
      } else {
        LOG.info("p2p registration refused ({}): {}", e.status(), e.getMessage());
      }
      return new Outcome(e.status(), Json.status(e.getMessage(), null, null, e.errorType()));
    } catch (RuntimeException e) {
      LOG.error("p2p registration failed unexpectedly", e);
      return new Outcome(500, Json.status("internal error: " + e.getClass().getSimpleName()));
    }
  }

  private Outcome run(Map<String, List<String>> params, String modelStore) throws PluginException {
    Registrar.Request req = parse(params);
    String key = single(params, "file_name");
    String lastSegment = localFileName(key);

    if (modelStore == null || modelStore.trim().isEmpty()) {
      throw PluginException.internal("the model server has no model_store configured", null);
    }
    Path store = Path.of(modelStore).toAbsolutePath();
    if (!Files.isDirectory(store)) {
      throw PluginException.internal("model store " + store + " is not a directory", null);
    }
    PluginConfig config;
    try {
      config = configs.current();
    } catch (ConfigException e) {
      throw PluginException.internal(e.getMessage(), null);
    }

    ObjectStorage storage = config.storage();
    String what = storage.type() + "://" + storage.bucket() + "/" + key;
    ArchiveNames.Claim claim;
    Path target;
    String held;
    synchronized (names) {
      claim = ArchiveNames.claim(store, what, key, lastSegment, inFlight.keySet());
      target = store.resolve(claim.fileName).normalize();
      held = inFlight.putIfAbsent(target, key + " since " + clock.instant());
    }
    String fileName = claim.fileName;
    req.url = fileName;
    if (claim.fresh && !fileName.equals(lastSegment)) {
      String other = ArchiveNames.owner(store, lastSegment);
      LOG.info("{} is stored as {}: {} in the model store holds {}", what, fileName, lastSegment,
          other == null ? "a file the plugin did not place" : other);
    }
    if (held != null) {
      LOG.info("p2p registration of {} not started: {} is downloading for an earlier request ({})", key, fileName,
          held);
      return new Outcome(202, Json.inProgress("Download of " + fileName + " in progress for an earlier request ("
          + held + "); ask again later"));
    }
    boolean placed = false;
    try {
      Outcome o = downloadAndRegister(req, key, what, fileName, config, storage, target);
      placed = Files.exists(target, LinkOption.NOFOLLOW_LINKS);
      return o;
    } finally {
      if (!placed) {
        ArchiveNames.release(store, claim);
      }
      inFlight.remove(target);
    }
  }

  private Outcome downloadAndRegister(Registrar.Request req, String key, String what, String fileName,
      PluginConfig config, ObjectStorage storage, Path target) throws PluginException {
    String signed = storage.signedUrl(key, clock.instant(), ObjectStorage.DEFAULT_EXPIRY);
    Map<String, String> headers = withCredentialTag(config.headers(), storage.credentialTag());
    String expectedTaskId = TaskId.forRequest(signed, config.filter(), header(headers, TAG_HEADER),
        header(headers, "X-Dragonfly-Application"), header(headers, "X-Dragonfly-Piece-Length"), config.taskIdRule());
    // Checked while this request holds the archive: no other request can create it meanwhile.
    boolean existed = Files.exists(target);
    long start = System.nanoTime();
    ProxyDownloader.Result dl =
        downloader.download(config.addr(), signed, headers, config.filter(), target, what,
            config.hardLinkDir(), config.maxBytes(), config.downloadTimeoutMillis());
    long millis = (System.nanoTime() - start) / 1_000_000;
    if (dl.taskId == null) {
      LOG.warn("p2p download of {} done: {} bytes in {} ms, but NOT through P2P: the peer proxy sent no task id "
          + "(expected task {} under the daemon {} rule)", what, dl.bytes, millis, expectedTaskId, config.taskIdRule());
    } else {
      LOG.info("p2p download of {} done: {} bytes in {} ms, task {} (expected {} under the daemon {} rule{}), {}",
          what, dl.bytes, millis, dl.taskId, expectedTaskId, config.taskIdRule(),
          dl.taskId.equals(expectedTaskId) ? "" : ": DIFFERENT, a preheat of the expected id is not used",
          dl.localHit ? "local hit" : "not a local hit (the daemon does not say whether a peer or the origin served it)");
    }
    if (Boolean.TRUE.equals(dl.hardLink)) {
      LOG.info("{} is a hard link of the peer daemon's copy: nothing was copied", fileName);
    } else if (dl.hardLink != null) {
      LOG.info("{} was streamed, not hard-linked: {}", fileName, dl.hardLinkFallback);
    }

    Registrar.Result result;
    try {
      result = registry.register(req);
    } catch (PluginException e) {
      if (!existed) {
        deleteQuietly(target);
      }
      LOG.info("registration of {} refused by the model server ({}): {}", fileName, e.status(), e.getMessage());
      return new Outcome(e.status(), Json.status(e.getMessage(), dl.taskId, dl.localHit, null, dl.hardLink));
    }
    if (result.status >= 400 && !existed) {
      deleteQuietly(target);
    }
    return new Outcome(result.status, Json.status(result.message, dl.taskId, dl.localHit, null, dl.hardLink));
  }

  static final String TAG_HEADER = "X-Dragonfly-Tag";

  /**
   * The configured headers with {@code X-Dragonfly-Tag} joined with the credentials' tag ({@link CredentialTag}):
   * every object the plugin reads is signed with credentials, so its task is named only by their holders.
   */
  static Map<String, String> withCredentialTag(Map<String, String> configured, String credentialTag) {
    Map<String, String> headers = new LinkedHashMap<>();
    String tag = null;
    for (Map.Entry<String, String> e : configured.entrySet()) {
      if (e.getKey().equalsIgnoreCase(TAG_HEADER)) {
        tag = e.getValue();
      } else {
        headers.put(e.getKey(), e.getValue());
      }
    }
    String joined = CredentialTag.join(tag, credentialTag);
    if (joined != null) {
      headers.put(TAG_HEADER, joined);
    }
    return headers;
  }

  private static String header(Map<String, String> headers, String name) {
    for (Map.Entry<String, String> e : headers.entrySet()) {
      if (e.getKey().equalsIgnoreCase(name)) {
        return e.getValue();
      }
    }
    return null;
  }

  private static void deleteQuietly(Path p) {
    try {
      Files.deleteIfExists(p);
    } catch (Exception e) {
      LOG.warn("cannot remove {}: {}", p, e.toString());
    }
  }

  /** Validates the query parameters (all but file_name, which {@link #localFileName} checks). */
  static Registrar.Request parse(Map<String, List<String>> params) throws PluginException {
    if (params.containsKey("url")) {
      throw PluginException.badRequest(
          "parameter \"url\" is not supported by this endpoint: name the object with file_name; it is downloaded "
              + "from the configured object storage through the P2P network");
    }
    for (String k : params.keySet()) {
      if (!PARAMS.contains(k)) {
        throw PluginException.badRequest("unknown parameter \"" + k + "\" (supported: file_name, model_name, runtime, "
            + "handler, batch_size, max_batch_delay, response_timeout, startup_timeout, initial_workers, synchronous)");
      }
    }
    Registrar.Request r = new Registrar.Request();
    r.modelName = single(params, "model_name");
    if (r.modelName != null && !MODEL_NAME.matcher(r.modelName).matches()) {
      throw PluginException.badRequest(
          "parameter \"model_name\" must start with a letter or digit and contain only letters, digits, '_', '-' and '.'");
    }
    r.runtime = single(params, "runtime");
    r.handler = single(params, "handler");
    r.batchSize = integer(params, "batch_size", 1, 1);
    r.maxBatchDelay = integer(params, "max_batch_delay", 100, 0);
    r.responseTimeout = integer(params, "response_timeout", -1, 1);
    r.startupTimeout = integer(params, "startup_timeout", -1, 1);
    r.initialWorkers = integer(params, "initial_workers", 0, 0);
    String sync = single(params, "synchronous");
    if (sync == null) {
      r.synchronous = true;
    } else if (sync.equalsIgnoreCase("true") || sync.equalsIgnoreCase("false")) {
      r.synchronous = Boolean.parseBoolean(sync);
    } else {
      throw PluginException.badRequest("parameter \"synchronous\" must be true or false");
    }
    return r;
  }

  /**
   * The model store file name for an object key: its last segment. The key must be relative, without empty,
   * {@code .} or {@code ..} segments, backslashes or control characters, and the name must not be hidden.
   */
  static String localFileName(String key) throws PluginException {
    if (key == null || key.trim().isEmpty()) {
      throw PluginException.badRequest("parameter \"file_name\" is required: the object key of the model archive");
    }
    if (key.length() > 1024) {
      throw PluginException.badRequest("parameter \"file_name\" is longer than 1024 characters");
    }
    if (key.startsWith("/")) {
      throw PluginException.badRequest("parameter \"file_name\" must be a relative object key, not an absolute path");
    }
    if (key.indexOf('\\') >= 0) {
      throw PluginException.badRequest("parameter \"file_name\" must not contain a backslash");
    }
    for (int i = 0; i < key.length(); i++) {
      if (Character.isISOControl(key.charAt(i))) {
        throw PluginException.badRequest("parameter \"file_name\" must not contain control characters");
      }
    }
    String[] segments = key.split("/", -1);
    for (String s : segments) {
      if (s.isEmpty() || s.equals(".") || s.equals("..")) {
        throw PluginException.badRequest(
            "parameter \"file_name\" must not contain empty, '.' or '..' path segments");
      }
    }
    String name = segments[segments.length - 1];
    if (name.startsWith(".")) {
      throw PluginException.badRequest("parameter \"file_name\" must not name a hidden file (leading '.')");
    }
    return name;
  }

  static String single(Map<String, List<String>> params, String name) throws PluginException {
    List<String> v = params.get(name);
    if (v == null || v.isEmpty()) {
      return null;
    }
    if (v.size() > 1) {
      throw PluginException.badRequest("parameter \"" + name + "\" is given more than once");
    }
    return v.get(0);
  }

  private static int integer(Map<String, List<String>> params, String name, int dflt, int min)
      throws PluginException {
    String v = single(params, name);
    if (v == null || v.isEmpty()) {
      return dflt;
    }
    int n;
    try {
      n = Integer.parseInt(v.trim());
    } catch (NumberFormatException e) {
      throw PluginException.badRequest("parameter \"" + name + "\" must be an integer");
    }
    if (n < min) {
      throw PluginException.badRequest("parameter \"" + name + "\" must be at least " + min);
    }
    return n;
  }
}
