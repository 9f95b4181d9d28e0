package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The object-key rules shared with the CRDs (test/vectors/object-keys.json): every key the apiserver accepts for
 * spec.fileName the plugin takes, and every key it rejects the plugin refuses with a 400. The TypeScript side checks
 * the same file, so the two can never disagree again.
 */
class ObjectKeyVectorsTest {
  static String expand(String key) {
    if (!key.startsWith("@repeat:")) {
      return key;
    }
    String[] p = key.split(":");
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < Integer.parseInt(p[2]); i++) {
      b.append(p[1]);
    }
    return b.toString();
  }

  static List<JsonObject> cases(String list) throws Exception {
    List<JsonObject> out = new ArrayList<>();
    for (JsonElement e : Vectors.load("object-keys.json").getAsJsonArray(list)) {
      out.add(e.getAsJsonObject());
    }
    return out;
  }

  @Test
  void theVectorsCoverBothSides() throws Exception {
    assertTrue(cases("accepted").size() >= 10);
    assertTrue(cases("rejected").size() >= 20);
  }

  @TestFactory
  Stream<DynamicTest> acceptedKeysGiveTheirModelStoreFileName() throws Exception {
    return cases("accepted").stream().map(c -> DynamicTest.dynamicTest(c.get("why").getAsString(), () -> {
      String key = expand(c.get("key").getAsString());
      assertEquals(expand(c.get("localFileName").getAsString()), ModelRegistration.localFileName(key));
    }));
  }

  @TestFactory
  Stream<DynamicTest> rejectedKeysAreRefusedWith400() throws Exception {
    return cases("rejected").stream().map(c -> DynamicTest.dynamicTest(c.get("why").getAsString(), () -> {
      String key = expand(c.get("key").getAsString());
      PluginException e = assertThrows(PluginException.class, () -> ModelRegistration.localFileName(key));
      assertEquals(400, e.status());
    }));
  }
}
