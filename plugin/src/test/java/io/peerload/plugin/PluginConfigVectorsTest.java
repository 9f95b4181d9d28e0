package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/**
 * The configuration rules shared with {@code peerload check} (test/vectors/plugin-config.json): the TypeScript side
 * runs the same cases against src/check/plugin-config.ts, so the check accepts exactly what the plugin accepts.
 */
class PluginConfigVectorsTest {
  /** Nulls kept: a field written as null is a case of its own. */
  private static final Gson GSON = new GsonBuilder().serializeNulls().create();
  /** Credentials in the vectors: never in a message. */
  private static final String[] SECRETS = {"vector-secret", "dmVjdG9yLWtleQ", "AKIAVECTOR"};

  @TempDir Path dir;

  static JsonObject vectors() throws Exception {
    return Vectors.load("plugin-config.json");
  }

  static List<JsonObject> cases(String list) throws Exception {
    List<JsonObject> out = new ArrayList<>();
    for (JsonElement e : vectors().getAsJsonArray(list)) {
      out.add(e.getAsJsonObject());
    }
    return out;
  }

  /** The directory the configuration is read from, holding the service account a gcs case names (sa.json). */
  private Path baseDir() throws Exception {
    Path sa = dir.resolve("sa.json");
    if (!Files.exists(sa)) {
      Files.write(sa, ObjectStorageTest.resource("gcs-conformance-service-account.json").getBytes(StandardCharsets.UTF_8));
    }
    return dir;
  }

  @Test
  void theVectorsCoverBothSides() throws Exception {
    assertTrue(cases("valid").size() >= 30);
    assertTrue(cases("invalid").size() >= 50);
  }

  @TestFactory
  Stream<DynamicTest> validConfigurationsGiveTheirNormalisedValues() throws Exception {
    String key = vectors().get("key").getAsString();
    return cases("valid").stream().map(c -> DynamicTest.dynamicTest(c.get("why").getAsString(), () -> {
      PluginConfig config = PluginConfig.parse(GSON.toJson(c.get("config")), "c.json", baseDir());
      Map<String, JsonElement> actual = new LinkedHashMap<>();
      actual.put("addr", GSON.toJsonTree(config.addr().toString()));
      actual.put("headers", GSON.toJsonTree(config.headers()));
      actual.put("filter", GSON.toJsonTree(config.filter()));
      actual.put("filterConfigured", GSON.toJsonTree(config.filterConfigured()));
      actual.put("type", GSON.toJsonTree(config.storage().type()));
      actual.put("bucket", GSON.toJsonTree(config.storage().bucket()));
      actual.put("objectURL", GSON.toJsonTree(config.storage().objectUrl(key)));
      actual.put("daemonRule", GSON.toJsonTree(config.taskIdRule().toString()));
      actual.put("maxBytes", GSON.toJsonTree(config.maxBytes()));
      actual.put("downloadTimeoutMs", GSON.toJsonTree(config.downloadTimeoutMillis()));
      for (Map.Entry<String, JsonElement> e : c.getAsJsonObject("expect").entrySet()) {
        assertEquals(e.getValue(), actual.get(e.getKey()), e.getKey());
      }
    }));
  }

  @TestFactory
  Stream<DynamicTest> invalidConfigurationsAreRefusedNamingTheField() throws Exception {
    return cases("invalid").stream().map(c -> DynamicTest.dynamicTest(c.get("why").getAsString(), () -> {
      String text = c.has("text") ? c.get("text").getAsString() : GSON.toJson(c.get("config"));
      ConfigException e = assertThrows(ConfigException.class, () -> PluginConfig.parse(text, "c.json", baseDir()));
      assertTrue(e.getMessage().startsWith("c.json: "), e.getMessage());
      if (!c.get("field").isJsonNull()) {
        String field = "field \"" + c.get("field").getAsString() + "\"";
        assertTrue(e.getMessage().contains(field), e.getMessage() + " should name " + field);
      }
      for (String secret : SECRETS) {
        assertFalse(e.getMessage().contains(secret), "a credential in: " + e.getMessage());
      }
    }));
  }
}
