package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import org.junit.jupiter.api.Test;

class JsonTest {
  @Test
  void quotesNewLinesAndBackslashesAreEscaped() {
    String msg = "Model \"tiny\" failed:\n\tC:\\path <b>&amp; é 中 \u0001";
    String body = Json.status(msg, "abc", Boolean.FALSE, "backend");
    JsonObject o = JsonParser.parseString(body).getAsJsonObject();
    assertEquals(msg, o.get("Status").getAsString());
    assertEquals("abc", o.get("TaskID").getAsString());
    assertFalse(o.get("LocalHit").getAsBoolean());
    assertFalse(o.has("CacheHit"), "never false: a remote hit and a miss look the same");
    assertEquals("backend", o.get("ErrorType").getAsString());
    assertTrue(body.contains("\\\"tiny\\\""), body);
    assertTrue(body.contains("\\n"), body);
    assertFalse(body.contains("\n"), "no raw new line in the body");
  }

  @Test
  void onlyStatusWhenNothingElseIsKnown() {
    assertEquals("{\"Status\":\"ok\"}", Json.status("ok"));
    assertEquals("{\"Status\":\"\"}", Json.status(null));
  }

  @Test
  void aLocalHitIsACacheHit() {
    JsonObject o = JsonParser.parseString(Json.status("ok", "t", Boolean.TRUE, null)).getAsJsonObject();
    assertTrue(o.get("CacheHit").getAsBoolean());
    assertTrue(o.get("LocalHit").getAsBoolean());
  }

  @Test
  void statusComesFirst() {
    assertTrue(Json.status("x", "t", Boolean.TRUE, null).startsWith("{\"Status\":"));
  }
}
