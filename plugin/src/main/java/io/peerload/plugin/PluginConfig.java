package io.peerload.plugin;

import static io.peerload.plugin.ConfigFields.byteSize;
import static io.peerload.plugin.ConfigFields.durationMillis;
import static io.peerload.plugin.ConfigFields.formatMillis;
import static io.peerload.plugin.ConfigFields.hasControl;
import static io.peerload.plugin.ConfigFields.primitiveString;
import static io.peerload.plugin.ConfigFields.setOf;
import static io.peerload.plugin.ConfigFields.string;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import com.google.gson.JsonSyntaxException;
import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import java.io.IOException;
import java.io.StringReader;
import java.net.URI;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * The plugin configuration file of seed 2.2, parsed and validated. Every error names the offending field; no error
 * or {@link #toString()} ever contains a credential. The top level (addr, header, filter, daemon_version, max_bytes,
 * download_timeout) is read
 * here; {@link ObjectStorageConfig} reads {@code object_storage}, {@link HardLinkDir} {@code hard_link_dir},
 * {@link ConfigUrls} the URLs and {@link ConfigFields} the typed fields.
 */
public final class PluginConfig {
  public static final String DEFAULT_ADDR = "http://127.0.0.1:4001";
  /**
   * Sent as {@code true} on every download: the daemon routes a request through P2P only when its URL matches the
   * daemon's {@code proxy.rules} (stock: {@code blobs/sha256.*}) or it carries this header, so without it every model
   * download would silently go straight to the origin.
   */
  public static final String USE_P2P_HEADER = "X-Dragonfly-Use-P2P";
  static final String PIECE_LENGTH_HEADER = "X-Dragonfly-Piece-Length";
  /**
   * {@code max_bytes} when not set: 256 GiB. Larger than any model archive expected here, yet a bound: without one
   * an endless or oversized body fills the model store's disk (and with it TorchServe's).
   */
  public static final long DEFAULT_MAX_BYTES = 256L << 30;
  /**
   * {@code download_timeout} when not set: 1 h, the whole download (head and body). The idle-read time-out alone
   * never ends a body that keeps trickling; an hour fetches 256 GiB at ~75 MB/s, and larger or slower downloads
   * set it higher.
   */
  public static final long DEFAULT_DOWNLOAD_TIMEOUT_MILLIS = 3_600_000L;
  static final long MIN_DOWNLOAD_TIMEOUT_MILLIS = 1_000L;
  /** A week: beyond that a deadline protects nothing, and the nanosecond arithmetic stays far from overflow. */
  static final long MAX_DOWNLOAD_TIMEOUT_MILLIS = 7 * 24 * 3_600_000L;

  private static final Pattern TOKEN = Pattern.compile("[!#$%&'*+.^_`|~0-9A-Za-z-]+");
  /** Headers the plugin owns: a configured value would break the request framing or the filter. */
  private static final Set<String> RESERVED_HEADERS =
      new HashSet<>(
          Arrays.asList(
              "host",
              "content-length",
              "transfer-encoding",
              "connection",
              "upgrade",
              "te",
              "trailer",
              "proxy-connection",
              "x-dragonfly-filter",
              "x-dragonfly-filtered-query-params",
              "x-dragonfly-output-path",
              "x-dragonfly-force-hard-link",
              USE_P2P_HEADER.toLowerCase(Locale.ROOT)));

  private static final Set<String> TOP_LEVEL = setOf(
      "addr", "header", "filter", "object_storage", "daemon_version", "hard_link_dir", "max_bytes", "download_timeout");

  private final URI addr;
  private final Map<String, String> headers;
  private final List<String> filter;
  private final boolean filterConfigured;
  private final ObjectStorage storage;
  private final TaskId.Rule taskIdRule;
  private final String hardLinkDir;
  private final long maxBytes;
  private final long downloadTimeoutMillis;

  private PluginConfig(URI addr, Map<String, String> headers, List<String> filter, boolean filterConfigured,
      ObjectStorage storage, TaskId.Rule taskIdRule, String hardLinkDir, long maxBytes, long downloadTimeoutMillis) {
    this.hardLinkDir = hardLinkDir;
    this.maxBytes = maxBytes;
    this.downloadTimeoutMillis = downloadTimeoutMillis;
    this.addr = addr;
    this.headers = Collections.unmodifiableMap(headers);
    this.filter = Collections.unmodifiableList(filter);
    this.filterConfigured = filterConfigured;
    this.storage = storage;
    this.taskIdRule = taskIdRule;
  }

  /** The peer's HTTP proxy. */
  public URI addr() {
    return addr;
  }

  /** Headers added to every proxied request (seed 2.2 {@code header}). */
  public Map<String, String> headers() {
    return headers;
  }

  /** The effective filter: the configured one, or the storage kind's default. */
  public List<String> filter() {
    return filter;
  }

  public boolean filterConfigured() {
    return filterConfigured;
  }

  public ObjectStorage storage() {
    return storage;
  }

  /** How the peer daemon ({@code daemon_version}) computes task ids; the plugin logs the id it expects with it. */
  public TaskId.Rule taskIdRule() {
    return taskIdRule;
  }

  /**
   * {@code hard_link_dir}: the model store's directory as the peer daemon sees it, {@code ${NAME}} replaced from
   * the environment; null (the default) when the daemon is not asked for hard links.
   */
  public String hardLinkDir() {
    return hardLinkDir;
  }

  /** {@code max_bytes}: the largest archive downloaded; a larger one is stopped (413) and nothing of it kept. */
  public long maxBytes() {
    return maxBytes;
  }

  /** {@code download_timeout}: how long one download (head and body) may take in all; then it is stopped (504). */
  public long downloadTimeoutMillis() {
    return downloadTimeoutMillis;
  }

  /** A summary safe for logs: no credential, no header value (headers may carry tokens). */
  @Override
  public String toString() {
    return "addr="
        + addr
        + " storage="
        + storage.type()
        + ":"
        + storage.bucket()
        + " headers="
        + headers.keySet()
        + " filter="
        + filter
        + (filterConfigured ? "" : " (default)")
        + " daemon_version="
        + taskIdRule
        + (hardLinkDir == null ? "" : " hard_link_dir=" + hardLinkDir)
        + " max_bytes="
        + maxBytes
        + " download_timeout="
        + formatMillis(downloadTimeoutMillis);
  }

  /**
   * Parses and validates a configuration.
   *
   * @param source where the text came from, for messages
   * @param baseDir directory relative {@code service_account_path}s are resolved against
   */
  public static PluginConfig parse(String json, String source, Path baseDir) throws ConfigException {
    return parse(json, source, baseDir, System.getenv());
  }

  /** As {@link #parse(String, String, Path)}, with {@code env} for the {@code ${NAME}}s of {@code hard_link_dir}. */
  static PluginConfig parse(String json, String source, Path baseDir, Map<String, String> env) throws ConfigException {
    JsonElement root;
    try {
      root = parseStrictJson(json);
    } catch (JsonParseException e) {
      // Only the position is kept from the parser's message: the file holds secrets and nothing of it is echoed.
      throw new ConfigException(source + ": not valid JSON" + position(e.getMessage()));
    }
    if (root == null || !root.isJsonObject()) {
      throw new ConfigException(source + ": the configuration must be a JSON object");
    }
    JsonObject o = root.getAsJsonObject();
    for (String k : o.keySet()) {
      if (!TOP_LEVEL.contains(k)) {
        throw new ConfigException(
            source + ": unknown field \"" + k + "\" (expected " + String.join(", ", TOP_LEVEL) + ")");
      }
    }

    URI addr = ConfigUrls.parseAddr(o.has("addr") && !o.get("addr").isJsonNull() ? string(o, "addr", source) : DEFAULT_ADDR, source);

    Map<String, String> headers = parseHeaders(o, source);
    List<String> filter = parseFilter(o, source);

    TaskId.Rule rule = TaskId.DEFAULT_RULE;
    if (o.has("daemon_version") && !o.get("daemon_version").isJsonNull()) {
      rule = TaskId.Rule.forVersion(string(o, "daemon_version", source));
      if (rule == null) {
        throw new ConfigException(source + ": field \"daemon_version\" must be \"1.4\", \"1.5.3+\" or the peer "
            + "daemon's (dragonfly-client) version such as 1.4.2 or v1.5.3");
      }
    }

    String hardLinkDir = null;
    if (o.has("hard_link_dir") && !o.get("hard_link_dir").isJsonNull()) {
      hardLinkDir = HardLinkDir.parse(string(o, "hard_link_dir", source), env, source);
    }

    long maxBytes = DEFAULT_MAX_BYTES;
    if (o.has("max_bytes") && !o.get("max_bytes").isJsonNull()) {
      maxBytes = byteSize(o.get("max_bytes"), "max_bytes", source);
    }
    long downloadTimeout = DEFAULT_DOWNLOAD_TIMEOUT_MILLIS;
    if (o.has("download_timeout") && !o.get("download_timeout").isJsonNull()) {
      downloadTimeout = durationMillis(o.get("download_timeout"), "download_timeout", source,
          MIN_DOWNLOAD_TIMEOUT_MILLIS, MAX_DOWNLOAD_TIMEOUT_MILLIS);
    }

    if (!o.has("object_storage") || o.get("object_storage").isJsonNull()) {
      throw new ConfigException(source + ": field \"object_storage\" is required");
    }
    if (!o.get("object_storage").isJsonObject()) {
      throw new ConfigException(source + ": field \"object_storage\" must be an object");
    }
    ObjectStorage storage = ObjectStorageConfig.parse(o.getAsJsonObject("object_storage"), source, baseDir);
    boolean configured = filter != null;
    return new PluginConfig(
        addr, headers, configured ? filter : new ArrayList<>(storage.defaultFilter()), configured, storage, rule,
        hardLinkDir, maxBytes, downloadTimeout);
  }

  /** {@code header}: names that are HTTP tokens and not the plugin's own, values without CR, LF or NUL. */
  private static Map<String, String> parseHeaders(JsonObject o, String source) throws ConfigException {
    Map<String, String> headers = new LinkedHashMap<>();
    if (o.has("header") && !o.get("header").isJsonNull()) {
      JsonElement h = o.get("header");
      if (!h.isJsonObject()) {
        throw new ConfigException(source + ": field \"header\" must be an object of header names to string values");
      }
      for (Map.Entry<String, JsonElement> e : h.getAsJsonObject().entrySet()) {
        String name = e.getKey();
        String field = "header." + name;
        if (!TOKEN.matcher(name).matches()) {
          throw new ConfigException(source + ": field \"" + field + "\": not a valid HTTP header name");
        }
        if (name.equalsIgnoreCase(USE_P2P_HEADER)) {
          throw new ConfigException(source + ": field \"" + field + "\": the plugin always sends " + USE_P2P_HEADER
              + ": true so that downloads go through P2P whatever the daemon's proxy rules; remove this entry");
        }
        if (RESERVED_HEADERS.contains(name.toLowerCase(Locale.ROOT))) {
          throw new ConfigException(source + ": field \"" + field + "\": this header is set by the plugin and cannot be configured");
        }
        String value = primitiveString(e.getValue(), field, source);
        if (value.indexOf('\r') >= 0 || value.indexOf('\n') >= 0 || value.indexOf('\0') >= 0) {
          throw new ConfigException(source + ": field \"" + field + "\": the value must not contain CR, LF or NUL");
        }
        // The daemon ignores a piece length it cannot parse, which silently changes the task id.
        if (name.equalsIgnoreCase(PIECE_LENGTH_HEADER) && !value.isEmpty() && TaskId.parsePieceLength(value) == null) {
          throw new ConfigException(source + ": field \"" + field + "\": not a size such as 4194304 or 4mib");
        }
        headers.put(name, value);
      }
    }
    return headers;
  }

  /** {@code filter}: the query parameter names, deduplicated; null when not configured. */
  private static List<String> parseFilter(JsonObject o, String source) throws ConfigException {
    List<String> filter = null;
    if (o.has("filter") && !o.get("filter").isJsonNull()) {
      JsonElement f = o.get("filter");
      if (!f.isJsonArray()) {
        throw new ConfigException(source + ": field \"filter\" must be an array of query parameter names");
      }
      filter = new ArrayList<>();
      int i = 0;
      for (JsonElement item : f.getAsJsonArray()) {
        String field = "filter[" + i++ + "]";
        String name = primitiveString(item, field, source);
        if (name.isEmpty() || name.indexOf('&') >= 0 || name.indexOf(',') >= 0 || name.trim().length() != name.length()
            || hasControl(name)) {
          throw new ConfigException(source + ": field \"" + field + "\": must be a non-empty query parameter name without '&', ',', control characters or surrounding spaces");
        }
        if (!filter.contains(name)) {
          filter.add(name);
        }
      }
    }
    return filter;
  }

  /**
   * JSON as RFC 8259 has it. JsonParser.parseString is lenient (unquoted names, single quotes), which would accept
   * files that {@code peerload check} and every other JSON reader refuse.
   */
  private static JsonElement parseStrictJson(String json) {
    JsonReader reader = new JsonReader(new StringReader(json));
    reader.setStrictness(Strictness.STRICT);
    try {
      JsonElement root = JsonParser.parseReader(reader);
      if (reader.peek() != JsonToken.END_DOCUMENT) {
        throw new JsonSyntaxException("Did not consume the entire document at line " + lineColumn(reader));
      }
      return root;
    } catch (IOException e) {
      throw new JsonSyntaxException(e.getMessage(), e);
    }
  }

  private static String lineColumn(JsonReader reader) {
    java.util.regex.Matcher m = Pattern.compile("line (\\d+) column (\\d+)").matcher(reader.toString());
    return m.find() ? m.group(1) + " column " + m.group(2) : "";
  }

  private static String position(String message) {
    java.util.regex.Matcher m =
        Pattern.compile("line (\\d+) column (\\d+)").matcher(message == null ? "" : message);
    return m.find() ? " (at line " + m.group(1) + " column " + m.group(2) + ")" : "";
  }
}
