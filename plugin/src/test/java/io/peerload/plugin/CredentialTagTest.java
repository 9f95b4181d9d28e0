package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The credential tag: the operator's and agent's values (shared vectors), and how it joins the configured tag. */
class CredentialTagTest {
  @TestFactory
  Stream<DynamicTest> sharedVectors() throws Exception {
    JsonObject storage = Vectors.load("object-storage.json");
    JsonObject doc = Vectors.load("credential-tag.json");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonElement e : doc.getAsJsonArray("cases")) {
      JsonObject c = e.getAsJsonObject();
      JsonObject loc = c.getAsJsonObject("location");
      tests.add(DynamicTest.dynamicTest(c.get("credentials").getAsString() + " " + loc, () -> {
        ObjectStorage s = ObjectStorageTest.fromVector(
            loc, storage.getAsJsonObject("credentialSets").getAsJsonObject(c.get("credentials").getAsString()));
        assertEquals(c.get("tag").getAsString(), s.credentialTag());
      }));
    }
    for (JsonElement e : doc.getAsJsonArray("joined")) {
      JsonObject j = e.getAsJsonObject();
      tests.add(DynamicTest.dynamicTest("joined " + j, () -> assertEquals(j.get("expected").getAsString(),
          CredentialTag.join(TaskIdTest.str(j, "tag"), TaskIdTest.str(j, "credential")))));
    }
    return tests.stream();
  }

  @Test
  void replacesTheConfiguredTagHeaderWhateverItsCase() {
    Map<String, String> configured = new LinkedHashMap<>();
    configured.put("x-dragonfly-tag", "v1");
    configured.put("X-Custom", "kept");
    Map<String, String> headers = ModelRegistration.withCredentialTag(configured, "peerload-00");
    assertEquals("v1/peerload-00", headers.get("X-Dragonfly-Tag"));
    assertFalse(headers.containsKey("x-dragonfly-tag"));
    assertEquals("kept", headers.get("X-Custom"));
    assertEquals("peerload-00", ModelRegistration.withCredentialTag(Map.of(), "peerload-00").get("X-Dragonfly-Tag"));
  }
}
