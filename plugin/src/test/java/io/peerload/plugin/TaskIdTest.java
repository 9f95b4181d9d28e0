package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

class TaskIdTest {
  static List<String> strings(JsonElement e) {
    List<String> out = new ArrayList<>();
    if (e != null && e.isJsonArray()) {
      for (JsonElement x : e.getAsJsonArray()) {
        out.add(x.getAsString());
      }
    }
    return out;
  }

  static String str(JsonObject o, String k) {
    return o.has(k) && !o.get(k).isJsonNull() ? o.get(k).getAsString() : null;
  }

  static Long num(JsonObject o, String k) {
    return o.has(k) && !o.get(k).isJsonNull() ? o.get(k).getAsLong() : null;
  }

  /** test/vectors/taskid.json: every case under both daemon rules (shared with src/storage/taskid.ts). */
  @TestFactory
  Stream<DynamicTest> sharedTaskIdVectors() throws Exception {
    JsonArray vectors = Vectors.load("taskid.json").getAsJsonArray("vectors");
    List<DynamicTest> tests = new ArrayList<>();
    int i = 0;
    for (JsonElement e : vectors) {
      JsonObject v = e.getAsJsonObject();
      String url = v.get("url").getAsString();
      List<String> filter = strings(v.get("filter"));
      for (TaskId.Rule rule : TaskId.Rule.values()) {
        JsonObject expected = v.getAsJsonObject("expected").getAsJsonObject(rule.toString());
        tests.add(
            DynamicTest.dynamicTest(
                "taskid.json #" + i + " " + rule + " " + url + " filter=" + filter,
                () -> {
                  assertEquals(expected.get("canonicalURL").getAsString(), TaskId.canonicalUrl(url, filter, rule));
                  assertEquals(
                      expected.get("taskID").getAsString(),
                      TaskId.compute(url, filter, str(v, "tag"), str(v, "application"), str(v, "revision"),
                          num(v, "pieceLength"), rule));
                }));
      }
      i++;
    }
    assertTrue(tests.size() >= 2 * 40, "expected both rules of at least 40 vectors, got " + tests.size());
    return tests.stream();
  }

  @Test
  void daemonVersions() {
    assertEquals(TaskId.Rule.V1_4, TaskId.Rule.forVersion("1.4"));
    assertEquals(TaskId.Rule.V1_5_3, TaskId.Rule.forVersion("1.5.3+"));
    assertEquals(TaskId.Rule.V1_4, TaskId.Rule.forVersion("1.4.2"));
    assertEquals(TaskId.Rule.V1_4, TaskId.Rule.forVersion("v1.5.2"));
    assertEquals(TaskId.Rule.V1_4, TaskId.Rule.forVersion("1.5"));
    assertEquals(TaskId.Rule.V1_5_3, TaskId.Rule.forVersion("1.5.3"));
    assertEquals(TaskId.Rule.V1_5_3, TaskId.Rule.forVersion(" v1.5.10 "));
    assertEquals(TaskId.Rule.V1_5_3, TaskId.Rule.forVersion("2.0.0-rc.1+build.5"));
    for (String bad : new String[] {"", "latest", "1", "1.4.x", ">=1.5.3", "1.5.3++"}) {
      assertNull(TaskId.Rule.forVersion(bad), bad);
    }
    assertEquals(TaskId.Rule.V1_4, TaskId.DEFAULT_RULE);
  }

  @TestFactory
  Stream<DynamicTest> sharedQueryEscapeVectors() throws Exception {
    JsonArray cases = Vectors.load("taskid.json").getAsJsonArray("queryEscape");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonElement e : cases) {
      JsonObject c = e.getAsJsonObject();
      tests.add(DynamicTest.dynamicTest("queryEscape " + c.get("in").getAsString(),
          () -> assertEquals(c.get("out").getAsString(), Encoding.formEncode(c.get("in").getAsString()))));
    }
    return tests.stream();
  }

  /** The contract's table (shared/contracts/peer-proxy.md, the 1.5.3+ daemon), independent of the vectors file. */
  @Test
  void contractVectors() {
    TaskId.Rule r = TaskId.Rule.V1_5_3;
    assertEquals("https://example.com/file.txt?a=1&b=2",
        TaskId.canonicalUrl("https://example.com/file.txt?z=9&b=2&a=1", Arrays.asList("z"), r));
    assertEquals("https://example.com/file.txt?a=1&b=2&b=1",
        TaskId.canonicalUrl("https://example.com/file.txt?b=2&a=1&b=1", Arrays.asList("c"), r));
    assertEquals("https://example.com", TaskId.canonicalUrl("https://example.com?foo=foo", Arrays.asList("foo"), r));
    assertEquals("https://example.com/file.txt?k=a+b&m=x%2Ay&n=c~d",
        TaskId.canonicalUrl("https://example.com/file.txt?k=a b&m=x*y&n=c~d", Arrays.asList("none"), r));
    assertEquals("http://www.xx.yy/path?u=f#size",
        TaskId.canonicalUrl("http://www.xx.yy/path?u=f&x=y&m=z&x=s#size", Arrays.asList("x", "m"), r));
    assertEquals("https://example.com/file.txt?b=2",
        TaskId.canonicalUrl("https://example.com/file.txt?a=1;x&b=2", Arrays.asList("none"), r));
    assertEquals("5844f27a257287e9b734256bb25603d8005422ced8c0377f15063ec11963b25f",
        TaskId.compute("https://example.com", Collections.emptyList(), "foo", "bar", "v1.0", 1024L, r));
    assertEquals("457b4328cde278e422c9e243f7bfd1e97f511fec43a80f535cf6b0ef6b086776",
        TaskId.compute("https://example.com?foo=foo&bar=bar", Arrays.asList("foo", "bar"), null, null, null, null, r));
    assertEquals("980ee327518ccc5a7c30703e1a2232e8ba9047b39431f940636c85b6146f8b9a",
        TaskId.compute("https://example.com/file.txt?b=2&a=1", Collections.emptyList(), null, null, null, null, r));
  }

  /** The id the plugin logs as expected: the daemon's default filter without a filter header, a parsed piece length. */
  @Test
  void forRequestFollowsWhatTheDaemonSees() {
    TaskId.Rule r = TaskId.Rule.V1_4;
    String a = "https://b.s3.amazonaws.com/m.mar?X-Amz-Date=20260101T000000Z&X-Amz-Signature=aa&v=1";
    String b = "https://b.s3.amazonaws.com/m.mar?X-Amz-Date=20260202T000000Z&X-Amz-Signature=bb&v=1";
    // No filter configured -> no header -> the daemon's default filter drops the signature parameters.
    assertEquals(TaskId.forRequest(a, Collections.emptyList(), null, null, null, r),
        TaskId.forRequest(b, Collections.emptyList(), null, null, null, r));
    assertEquals(TaskId.compute(a, TaskId.DAEMON_DEFAULT_FILTER, null, null, null, null, r),
        TaskId.forRequest(a, Collections.emptyList(), null, null, null, r));
    // A configured filter is used as it is.
    assertEquals(TaskId.compute(a, Arrays.asList("v"), "t", "app", null, null, r),
        TaskId.forRequest(a, Arrays.asList("v"), "t", "app", null, r));
    // X-Dragonfly-Piece-Length counts once it parses, in the daemon's units; otherwise it is ignored.
    assertEquals(TaskId.compute(a, Arrays.asList("v"), null, null, null, 4194304L, r),
        TaskId.forRequest(a, Arrays.asList("v"), null, null, "4 MiB", r));
    assertEquals(TaskId.compute(a, Arrays.asList("v"), null, null, null, 4000000L, r),
        TaskId.forRequest(a, Arrays.asList("v"), null, null, "4mb", r));
    assertEquals(TaskId.compute(a, Arrays.asList("v"), null, null, null, null, r),
        TaskId.forRequest(a, Arrays.asList("v"), null, null, "four", r));
    assertEquals(Long.valueOf(1536), TaskId.parsePieceLength("1.5KiB"));
    assertEquals(Long.valueOf(4194304), TaskId.parsePieceLength("4194304"));
    assertEquals(null, TaskId.parsePieceLength("4 parsecs"));
  }
}
