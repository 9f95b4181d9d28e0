package io.peerload.plugin;

import static io.peerload.plugin.ConfigFields.primitiveString;
import static io.peerload.plugin.ConfigFields.setOf;
import static io.peerload.plugin.ConfigUrls.baseUrl;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * The {@code object_storage} section (seed 2.2): which fields each storage type takes, their checks, and the
 * {@link ObjectStorage} that signs its URLs. Every error names the field as {@code object_storage.<name>}.
 */
final class ObjectStorageConfig {
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

  private ObjectStorageConfig() {}

  /**
   * Parses the section.
   *
   * @param baseDir directory relative {@code service_account_path}s are resolved against
   */
  static ObjectStorage parse(JsonObject s, String source, Path baseDir) throws ConfigException {
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
        return s3(v, source);
      case "oss":
        return oss(v, source);
      case "gcs":
        return gcs(v, source, baseDir);
      case "abs":
        return abs(v, source);
      default:
        throw new AssertionError(type);
    }
  }

  private static ObjectStorage s3(Map<String, String> v, String source) throws ConfigException {
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

  private static ObjectStorage oss(Map<String, String> v, String source) throws ConfigException {
    String e = v.get("endpoint");
    String endpoint = baseUrl(e.contains("://") ? e : "https://" + e, "object_storage.endpoint", source, false);
    return new OssStorage(v.get("bucket_name"), endpoint, v.get("access_key_id"), v.get("access_key_secret"));
  }

  private static ObjectStorage gcs(Map<String, String> v, String source, Path baseDir) throws ConfigException {
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

  private static ObjectStorage abs(Map<String, String> v, String source) throws ConfigException {
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

  private static void checkName(String name, String field, String source) throws ConfigException {
    if (!name.matches("[A-Za-z0-9][A-Za-z0-9._-]{0,254}")) {
      throw new ConfigException(source + ": field \"" + field + "\" is not a valid bucket/container name");
    }
  }
}
