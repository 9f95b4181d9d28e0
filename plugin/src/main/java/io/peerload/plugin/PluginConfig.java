package io.peerload.plugin;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import com.google.gson.JsonSyntaxException;
import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;
import java.io.IOException;
import java.io.StringReader;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
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
 * or {@link #toString()} ever contains a credential.
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

  private static final Set<String> TOP_LEVEL = setOf("addr", "header", "filter", "object_storage", "daemon_version", "hard_link_dir");
  /** {@code ${NAME}} in {@code hard_link_dir}: the per-pod part of a node volume's path (a pod name, say). */
  private static final Pattern ENV_REF = Pattern.compile("\\$\\{([A-Za-z_][A-Za-z0-9_]*)\\}");
  private static final Map<String, Set<String>> REQUIRED = new LinkedHashMap<>();
  private static final Map<String, Set<String>> OPTIONAL = new LinkedHashMap<>();

  static {
    REQUIRED.put("s3", setOf("type", "bucket_name", "access_key", "secret_key"));
    OPTIONAL.put("s3", setOf("region", "endpoint", "path_style", "session_token"));
    REQUIRED.put("oss", setOf("type", "bucket_name", "endpoint", "access_key_id", "access_key_secret"));
    OPTIONAL.put("oss", setOf());
    REQUIRED.put("gcs", setOf("type", "bucket_name", "project_id", "service_account_path"));
    OPTIONAL.put("gcs", setOf("endpoint"));
    REQUIRED.put("abs", setOf("type", "account_name", "account_key", "container_name"));
    OPTIONAL.put("abs", setOf("endpoint"));
  }

  private final URI addr;
  private final Map<String, String> headers;
  private final List<String> filter;
  private final boolean filterConfigured;
  private final ObjectStorage storage;
  private final TaskId.Rule taskIdRule;
  private final String hardLinkDir;

  private PluginConfig(URI addr, Map<String, String> headers, List<String> filter, boolean filterConfigured,
      ObjectStorage storage, TaskId.Rule taskIdRule, String hardLinkDir) {
    this.hardLinkDir = hardLinkDir;
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
        + (hardLinkDir == null ? "" : " hard_link_dir=" + hardLinkDir);
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
            source + ": unknown field \"" + k + "\" (expected addr, header, filter, object_storage, daemon_version, hard_link_dir)");
      }
    }

    URI addr = parseAddr(o.has("addr") && !o.get("addr").isJsonNull() ? string(o, "addr", source) : DEFAULT_ADDR, source);

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
      hardLinkDir = hardLinkDir(string(o, "hard_link_dir", source), env, source);
    }

    if (!o.has("object_storage") || o.get("object_storage").isJsonNull()) {
      throw new ConfigException(source + ": field \"object_storage\" is required");
    }
    if (!o.get("object_storage").isJsonObject()) {
      throw new ConfigException(source + ": field \"object_storage\" must be an object");
    }
    ObjectStorage storage = parseStorage(o.getAsJsonObject("object_storage"), source, baseDir);
    boolean configured = filter != null;
    return new PluginConfig(
        addr, headers, configured ? filter : new ArrayList<>(storage.defaultFilter()), configured, storage, rule,
        hardLinkDir);
  }

  /**
   * Validates {@code hard_link_dir} and replaces its {@code ${NAME}}s. The daemon needs an absolute path (it
   * resolves nothing), and the path ends up in a request header, so no control characters.
   */
  static String hardLinkDir(String raw, Map<String, String> env, String source) throws ConfigException {
    String field = source + ": field \"hard_link_dir\"";
    java.util.regex.Matcher m = ENV_REF.matcher(raw);
    StringBuilder b = new StringBuilder();
    while (m.find()) {
      String value = env.get(m.group(1));
      if (value == null || value.isEmpty()) {
        throw new ConfigException(field + " uses ${" + m.group(1) + "}, which is not set in the model server's "
            + "environment: set it (e.g. from the pod's metadata.name) or write the path out");
      }
      m.appendReplacement(b, java.util.regex.Matcher.quoteReplacement(value));
    }
    m.appendTail(b);
    String dir = b.toString();
    if (dir.contains("${")) {
      throw new ConfigException(field + ": only ${NAME} (letters, digits, '_') can be replaced from the environment");
    }
    if (!dir.startsWith("/")) {
      throw new ConfigException(field + " must be an absolute path: the model store's directory as the peer daemon "
          + "sees it (the same path when both pods mount the node volume at the same place)");
    }
    if (hasControl(dir)) {
      throw new ConfigException(field + " must not contain control characters");
    }
    for (String segment : dir.split("/")) {
      if (segment.equals(".") || segment.equals("..")) {
        throw new ConfigException(field + " must not contain '.' or '..' segments");
      }
    }
    return dir.length() > 1 && dir.endsWith("/") ? dir.substring(0, dir.length() - 1) : dir;
  }

  private static ObjectStorage parseStorage(JsonObject s, String source, Path baseDir) throws ConfigException {
    if (!s.has("type")) {
      throw new ConfigException(source + ": field \"object_storage.type\" is required (s3, oss, gcs or abs)");
    }
    String type = primitiveString(s.get("type"), "object_storage.type", source);
    if (!REQUIRED.containsKey(type)) {
      throw new ConfigException(source + ": field \"object_storage.type\" must be one of s3, oss, gcs, abs");
    }
    Set<String> required = REQUIRED.get(type);
    Set<String> optional = OPTIONAL.get(type);
    for (String k : s.keySet()) {
      if (!required.contains(k) && !optional.contains(k)) {
        throw new ConfigException(
            source + ": field \"object_storage." + k + "\" is not a field of object storage type " + type
                + " (expected " + String.join(", ", required) + (optional.isEmpty() ? "" : "; optional " + String.join(", ", optional)) + ")");
      }
    }
    Map<String, String> v = new LinkedHashMap<>();
    for (String k : required) {
      String field = "object_storage." + k;
      if (!s.has(k) || s.get(k).isJsonNull()) {
        throw new ConfigException(source + ": field \"" + field + "\" is required for object storage type " + type);
      }
      String value = primitiveString(s.get(k), field, source);
      if (value.trim().isEmpty()) {
        throw new ConfigException(source + ": field \"" + field + "\" must not be empty");
      }
      v.put(k, value.trim());
    }
    for (String k : optional) {
      if (s.has(k) && !s.get(k).isJsonNull()) {
        v.put(k, primitiveString(s.get(k), "object_storage." + k, source).trim());
      }
    }
    if (v.containsKey("bucket_name")) {
      checkName(v.get("bucket_name"), "object_storage.bucket_name", source);
    }
    switch (type) {
      case "s3":
        {
          String endpoint = v.containsKey("endpoint") && !v.get("endpoint").isEmpty()
              ? baseUrl(v.get("endpoint"), "object_storage.endpoint", source, false) : null;
          boolean pathStyle = false;
          if (v.containsKey("path_style")) {
            String p = v.get("path_style").toLowerCase(Locale.ROOT);
            if (!p.equals("true") && !p.equals("false")) {
              throw new ConfigException(source + ": field \"object_storage.path_style\" must be true or false");
            }
            pathStyle = p.equals("true");
            if (pathStyle && endpoint == null) {
              throw new ConfigException(source + ": field \"object_storage.path_style\" needs object_storage.endpoint");
            }
          }
          String region = v.getOrDefault("region", "");
          if (!region.isEmpty() && !region.matches("[a-z0-9-]{1,64}")) {
            throw new ConfigException(source + ": field \"object_storage.region\" must look like us-east-1");
          }
          return new S3Storage(v.get("bucket_name"), region, v.get("access_key"), v.get("secret_key"),
              v.get("session_token"), endpoint, pathStyle);
        }
      case "oss":
        {
          String e = v.get("endpoint");
          String endpoint = baseUrl(e.contains("://") ? e : "https://" + e, "object_storage.endpoint", source, false);
          return new OssStorage(v.get("bucket_name"), endpoint, v.get("access_key_id"), v.get("access_key_secret"));
        }
      case "gcs":
        {
          String endpoint = v.containsKey("endpoint") && !v.get("endpoint").isEmpty()
              ? baseUrl(v.get("endpoint"), "object_storage.endpoint", source, false) : null;
          Path sa = baseDir.resolve(v.get("service_account_path"));
          String text;
          try {
            text = new String(Files.readAllBytes(sa), StandardCharsets.UTF_8);
          } catch (IOException e) {
            throw new ConfigException(source + ": field \"object_storage.service_account_path\": cannot read " + sa
                + " (" + e.getClass().getSimpleName() + ")");
          }
          String where = source + ": service account file " + sa;
          JsonObject key;
          try {
            JsonElement parsed = JsonParser.parseString(text);
            if (!parsed.isJsonObject()) {
              throw new ConfigException(where + " must be a JSON object");
            }
            key = parsed.getAsJsonObject();
          } catch (JsonParseException e) {
            throw new ConfigException(where + " is not valid JSON (field \"object_storage.service_account_path\")");
          }
          if (!key.has("client_email") || !key.get("client_email").isJsonPrimitive()) {
            throw new ConfigException(where + ": field \"client_email\" is required");
          }
          if (!key.has("private_key") || !key.get("private_key").isJsonPrimitive()) {
            throw new ConfigException(where + ": field \"private_key\" is required");
          }
          try {
            return new GcsStorage(v.get("bucket_name"), v.get("project_id"), key.get("client_email").getAsString(),
                GcsStorage.parsePrivateKey(key.get("private_key").getAsString()), endpoint);
          } catch (GeneralSecurityException | IllegalArgumentException e) {
            throw new ConfigException(where + ": field \"private_key\" is not a PKCS#8 RSA private key in PEM");
          }
        }
      case "abs":
        {
          String endpoint = v.containsKey("endpoint") && !v.get("endpoint").isEmpty()
              ? baseUrl(v.get("endpoint"), "object_storage.endpoint", source, false) : null;
          if (!v.get("account_name").matches("[a-z0-9]{3,24}")) {
            throw new ConfigException(source + ": field \"object_storage.account_name\" must be 3-24 lower-case letters or digits");
          }
          checkName(v.get("container_name"), "object_storage.container_name", source);
          try {
            if (Base64.getDecoder().decode(v.get("account_key")).length == 0) {
              throw new IllegalArgumentException("empty");
            }
          } catch (IllegalArgumentException e) {
            throw new ConfigException(source + ": field \"object_storage.account_key\" must be the base64 account key");
          }
          return new AbsStorage(v.get("account_name"), v.get("account_key"), v.get("container_name"), endpoint);
        }
      default:
        throw new AssertionError(type);
    }
  }

  private static void checkName(String name, String field, String source) throws ConfigException {
    if (!name.matches("[A-Za-z0-9][A-Za-z0-9._-]{0,254}")) {
      throw new ConfigException(source + ": field \"" + field + "\" is not a valid bucket/container name");
    }
  }

  private static URI parseAddr(String addr, String source) throws ConfigException {
    String a = addr.trim();
    if (!a.contains("://")) {
      a = "http://" + a; // "127.0.0.1:4001" is a common way to write it
    }
    URI u;
    try {
      u = new URI(a);
    } catch (URISyntaxException e) {
      throw new ConfigException(source + ": field \"addr\" is not a URL");
    }
    if (!"http".equalsIgnoreCase(u.getScheme())) {
      throw new ConfigException(source + ": field \"addr\" must be an http:// URL (the peer's proxy speaks plain HTTP)");
    }
    if (u.getHost() == null || u.getRawUserInfo() != null || !portInRange(u.getPort())) {
      throw new ConfigException(source + ": field \"addr\" must be http://host:port");
    }
    if ((u.getRawPath() != null && !u.getRawPath().isEmpty() && !u.getRawPath().equals("/")) || u.getRawQuery() != null) {
      throw new ConfigException(source + ": field \"addr\" must not have a path or query");
    }
    return URI.create("http://" + u.getHost() + ":" + (u.getPort() == -1 ? 80 : u.getPort()));
  }

  private static String baseUrl(String value, String field, String source, boolean allowPath) throws ConfigException {
    URI u;
    try {
      u = new URI(trimSlash(value));
    } catch (URISyntaxException e) {
      throw new ConfigException(source + ": field \"" + field + "\" is not a URL");
    }
    String scheme = u.getScheme() == null ? "" : u.getScheme().toLowerCase(Locale.ROOT);
    if (!scheme.equals("http") && !scheme.equals("https")) {
      throw new ConfigException(source + ": field \"" + field + "\" must be an http:// or https:// URL");
    }
    if (u.getHost() == null || u.getRawUserInfo() != null || u.getRawQuery() != null || u.getRawFragment() != null
        || !portInRange(u.getPort())) {
      throw new ConfigException(source + ": field \"" + field + "\" must be scheme://host[:port]");
    }
    if (!allowPath && u.getRawPath() != null && !u.getRawPath().isEmpty()) {
      throw new ConfigException(source + ": field \"" + field + "\" must not have a path");
    }
    return scheme + "://" + u.getHost() + (u.getPort() == -1 ? "" : ":" + u.getPort());
  }

  /** java.net.URI takes any port number; the plugin could not connect to one outside 1-65535. */
  private static boolean portInRange(int port) {
    return port == -1 || (port >= 1 && port <= 65535);
  }

  private static String trimSlash(String s) {
    String t = s.trim();
    while (t.endsWith("/")) {
      t = t.substring(0, t.length() - 1);
    }
    return t;
  }

  private static String string(JsonObject o, String field, String source) throws ConfigException {
    return primitiveString(o.get(field), field, source);
  }

  private static String primitiveString(JsonElement e, String field, String source) throws ConfigException {
    if (e == null || !e.isJsonPrimitive()) {
      throw new ConfigException(source + ": field \"" + field + "\" must be a string");
    }
    JsonPrimitive p = e.getAsJsonPrimitive();
    if (!p.isString() && !p.isBoolean()) {
      throw new ConfigException(source + ": field \"" + field + "\" must be a string");
    }
    return p.getAsString();
  }

  private static boolean hasControl(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (Character.isISOControl(s.charAt(i))) {
        return true;
      }
    }
    return false;
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

  private static Set<String> setOf(String... items) {
    return Collections.unmodifiableSet(new java.util.LinkedHashSet<>(Arrays.asList(items)));
  }
}
