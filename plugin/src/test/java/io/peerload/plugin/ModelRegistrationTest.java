package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class ModelRegistrationTest {
  @TempDir Path dir;

  static Map<String, List<String>> params(String... kv) {
    Map<String, List<String>> m = new LinkedHashMap<>();
    for (int i = 0; i < kv.length; i += 2) {
      m.computeIfAbsent(kv[i], k -> new ArrayList<>()).add(kv[i + 1]);
    }
    return m;
  }

  static JsonObject json(ModelRegistration.Outcome o) {
    return JsonParser.parseString(o.body).getAsJsonObject();
  }

  // ---- path safety ----------------------------------------------------------------------------------------

  @Test
  void fileNameIsTheLastSegmentOfTheKey() throws Exception {
    assertEquals("resnet.mar", ModelRegistration.localFileName("resnet.mar"));
    assertEquals("resnet.mar", ModelRegistration.localFileName("team a/models/resnet.mar"));
    assertEquals("r..mar", ModelRegistration.localFileName("x/r..mar"));
  }

  @ParameterizedTest
  @ValueSource(strings = {"", " ", "/etc/passwd", "../x.mar", "a/../../x.mar", "a/./x.mar", "a//x.mar", "a/",
      "..", ".", "a\\..\\x.mar", "a/.hidden.mar", "x\u0000.mar", "a/b\n.mar"})
  void unsafeKeysAreRejected(String key) {
    PluginException e = assertThrows(PluginException.class, () -> ModelRegistration.localFileName(key));
    assertEquals(400, e.status());
  }

  // ---- parameters -----------------------------------------------------------------------------------------

  @Test
  void urlIsRejectedWithAClearMessage() {
    PluginException e = assertThrows(PluginException.class,
        () -> ModelRegistration.parse(params("url", "https://x/y.mar")));
    assertEquals(400, e.status());
    assertTrue(e.getMessage().contains("\"url\" is not supported"), e.getMessage());
  }

  @Test
  void defaultsAndOptionalParameters() throws Exception {
    Registrar.Request d = ModelRegistration.parse(params("file_name", "a.mar"));
    assertEquals(0, d.initialWorkers, "seed 2.4: 0 initial workers");
    assertTrue(d.synchronous);
    assertEquals(1, d.batchSize);
    assertEquals(100, d.maxBatchDelay);
    assertEquals(-1, d.responseTimeout);
    assertEquals(-1, d.startupTimeout);
    Registrar.Request r = ModelRegistration.parse(params("file_name", "a.mar", "model_name", "m-1.v2", "runtime",
        "python", "handler", "image_classifier", "batch_size", "8", "max_batch_delay", "0", "response_timeout",
        "60", "startup_timeout", "300", "initial_workers", "2", "synchronous", "false"));
    assertEquals("m-1.v2", r.modelName);
    assertEquals("python", r.runtime);
    assertEquals("image_classifier", r.handler);
    assertEquals(8, r.batchSize);
    assertEquals(0, r.maxBatchDelay);
    assertEquals(60, r.responseTimeout);
    assertEquals(300, r.startupTimeout);
    assertEquals(2, r.initialWorkers);
    assertFalse(r.synchronous);
  }

  @ParameterizedTest
  @ValueSource(strings = {"batch_size=0", "batch_size=x", "initial_workers=-1", "max_batch_delay=-5",
      "response_timeout=0", "synchronous=yes", "model_name=../x", "model_name=a b", "bogus=1"})
  void badParametersAre400(String kv) {
    String[] p = kv.split("=", 2);
    PluginException e = assertThrows(PluginException.class,
        () -> ModelRegistration.parse(params("file_name", "a.mar", p[0], p[1])));
    assertEquals(400, e.status());
    assertTrue(e.getMessage().contains("\"" + p[0] + "\""), e.getMessage());
  }

  @Test
  void repeatedParameterIs400() {
    assertEquals(400, assertThrows(PluginException.class,
        () -> ModelRegistration.parse(params("file_name", "a.mar", "batch_size", "1", "batch_size", "2"))).status());
  }

  // ---- the whole flow --------------------------------------------------------------------------------------

  Path writeConfig(String addr) throws Exception {
    return writeConfig(addr, "");
  }

  /** With {@code extra} top-level fields, written as {@code "name":value,}. */
  Path writeConfig(String addr, String extra) throws Exception {
    Path cfg = dir.resolve("config.json");
    Files.write(cfg, ("{" + extra + "\"addr\":\"" + addr + "\",\"header\":{\"X-Dragonfly-Application\":\"torchserve\"},"
        + "\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"models\",\"region\":\"us-east-1\","
        + "\"access_key\":\"AKIAIOSFODNN7EXAMPLE\",\"secret_key\":\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"}}")
        .getBytes(StandardCharsets.UTF_8));
    return cfg;
  }

  ModelRegistration registration(Path cfg, ModelRegistration.Registry registry) {
    return new ModelRegistration(new ConfigSource(cfg), new ProxyDownloader(2_000, 2_000), registry,
        Clock.fixed(Instant.parse("2026-01-15T08:00:00Z"), ZoneOffset.UTC));
  }

  @Test
  void downloadsThenRegistersAndAnswersJson() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    AtomicReference<Registrar.Request> seen = new AtomicReference<>();
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok("PK-archive".getBytes(StandardCharsets.US_ASCII),
        "X-Dragonfly-Task-ID: 0123", "X-Dragonfly-Task-Download-Finished: true"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        seen.set(r);
        assertTrue(Files.exists(store.resolve("tiny.mar")), "downloaded before registration");
        return new Registrar.Result(200, "Model \"tiny\" Version: 1.0 registered with 0 initial workers. "
            + "Use scale workers API to add workers for the model.");
      });
      ModelRegistration.Outcome o = reg.handle(params("file_name", "team/tiny.mar"), store.toString());
      assertEquals(200, o.status, o.body);
      JsonObject body = json(o);
      assertTrue(body.get("Status").getAsString().startsWith("Model \"tiny\" Version: 1.0 registered with 0"));
      assertEquals("0123", body.get("TaskID").getAsString());
      assertTrue(body.get("CacheHit").getAsBoolean());
      assertTrue(body.get("LocalHit").getAsBoolean());
      assertEquals("tiny.mar", seen.get().url);
      FakeProxy.Received req = proxy.received.get(0);
      assertTrue(req.requestLine.startsWith("GET https://models.s3.us-east-1.amazonaws.com/team/tiny.mar?X-Amz-"));
      assertEquals(String.join(",", new S3Storage("b", null, "a", "s", null, null, false).defaultFilter()),
          req.headers.get("X-Dragonfly-Filtered-Query-Params"));
      assertEquals(String.join("&", new S3Storage("b", null, "a", "s", null, null, false).defaultFilter()),
          req.headers.get("X-Dragonfly-Filter"));
      assertEquals("torchserve", req.headers.get("X-Dragonfly-Application"));
      assertEquals("true", req.headers.get("X-Dragonfly-Use-P2P"));
    }
  }

  @Test
  void conflictIs409JsonAndANewFileIsRemoved() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[10], "X-Dragonfly-Task-ID: t"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        throw PluginException.conflict("Model version 1.0 is already registered for model \"tiny\"");
      });
      ModelRegistration.Outcome o = reg.handle(params("file_name", "tiny.mar"), store.toString());
      assertEquals(409, o.status);
      assertEquals("Model version 1.0 is already registered for model \"tiny\"", json(o).get("Status").getAsString());
      assertEquals("t", json(o).get("TaskID").getAsString());
      assertFalse(Files.exists(store.resolve("tiny.mar")));
    }
  }

  @Test
  void passesThroughWorkerScalingStatuses() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    for (int code : new int[] {202, 206}) {
      try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[1]))) {
        ModelRegistration reg = registration(writeConfig(proxy.uri().toString()),
            r -> new Registrar.Result(code, "Workers scaling in progress..."));
        ModelRegistration.Outcome o = reg.handle(params("file_name", "m.mar", "initial_workers", "1"), store.toString());
        assertEquals(code, o.status);
        assertEquals("Workers scaling in progress...", json(o).get("Status").getAsString());
      }
    }
  }

  @Test
  void errorsAreJsonWithTheirStatus() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    ModelRegistration.Registry never = r -> {
      throw new AssertionError("must not register");
    };
    try (FakeProxy proxy = new FakeProxy(FakeProxy.status(404, "", "X-Dragonfly-Error-Type: backend"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), never);
      assertEquals(404, reg.handle(params("file_name", "missing.mar"), store.toString()).status);
      proxy.script(FakeProxy.status(502, "", "X-Dragonfly-Error-Type: proxy"));
      ModelRegistration.Outcome o = reg.handle(params("file_name", "m.mar"), store.toString());
      assertEquals(502, o.status);
      assertEquals("proxy", json(o).get("ErrorType").getAsString());
      assertEquals(400, reg.handle(params("url", "x"), store.toString()).status);
      assertEquals(500, reg.handle(params("file_name", "m.mar"), dir.resolve("nope").toString()).status);
      assertEquals(500, reg.handle(params("file_name", "m.mar"), null).status);
    }
    ModelRegistration missingConfig = registration(dir.resolve("absent.json"), never);
    ModelRegistration.Outcome o = missingConfig.handle(params("file_name", "m.mar"), store.toString());
    assertEquals(500, o.status);
    assertTrue(json(o).get("Status").getAsString().contains("P2P_ENDPOINT_CONFIG"));
    try (java.util.stream.Stream<Path> files = Files.list(store)) {
      assertEquals(Collections.emptyList(), Arrays.asList(files.toArray()));
    }
  }

  @Test
  void unexpectedRuntimeErrorsAreStill500Json() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[1]))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        throw new IllegalStateException("boom \"quoted\"\nnew line");
      });
      ModelRegistration.Outcome o = reg.handle(params("file_name", "m.mar"), store.toString());
      assertEquals(500, o.status);
      assertEquals("internal error: IllegalStateException", json(o).get("Status").getAsString());
    }
  }

  // ---- one download per archive ----------------------------------------------------------------------------

  @Test
  void aPostForAnArchiveBeingDownloadedStartsNothingAndAnswers202InProgress() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    AtomicReference<ModelRegistration.Outcome> second = new AtomicReference<>();
    AtomicReference<ModelRegistration> self = new AtomicReference<>();
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok("PK".getBytes(StandardCharsets.US_ASCII)))) {
      // The second POST for the same object arrives while the first registers.
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        second.set(self.get().handle(params("file_name", "team/tiny.mar"), store.toString()));
        assertTrue(Files.exists(store.resolve("tiny.mar")), "the answer leaves the first request's archive alone");
        return new Registrar.Result(200, "Model \"tiny\" Version: 1.0 registered with 0 initial workers");
      });
      self.set(reg);
      ModelRegistration.Outcome first = reg.handle(params("file_name", "team/tiny.mar"), store.toString());
      assertEquals(200, first.status, first.body);
      assertEquals(202, second.get().status, second.get().body);
      JsonObject body = json(second.get());
      assertEquals("DownloadInProgress", body.get("type").getAsString());
      assertEquals(202, body.get("code").getAsInt());
      assertTrue(body.get("Status").getAsString().contains("tiny.mar in progress"), body.toString());
      assertEquals(1, proxy.received.size(), "one download");
      assertTrue(Files.exists(store.resolve("tiny.mar")));

      // Once the first is done, a POST is handled again (here: the model server says it is registered).
      ModelRegistration conflicting = registration(writeConfig(proxy.uri().toString()), r -> {
        throw PluginException.conflict("Model version 1.0 is already registered for model \"tiny\"");
      });
      assertEquals(409, conflicting.handle(params("file_name", "team/tiny.mar"), store.toString()).status);
      assertEquals(2, proxy.received.size());
      assertTrue(Files.exists(store.resolve("tiny.mar")), "a 409 never removes an archive it did not create");
    }
  }

  // ---- one file per object ---------------------------------------------------------------------------------

  /** Files of the model store other than the plugin's hidden records. */
  static List<String> archives(Path store) throws Exception {
    try (java.util.stream.Stream<Path> files = Files.list(store)) {
      List<String> names = new ArrayList<>();
      files.map(p -> p.getFileName().toString()).filter(n -> !n.startsWith(ArchiveNames.RECORD_PREFIX))
          .sorted().forEach(names::add);
      return names;
    }
  }

  static Registrar.Result registered() {
    return new Registrar.Result(200, "Model \"m\" Version: 1.0 registered with 0 initial workers");
  }

  @Test
  void twoKeysWithTheSameLastSegmentNeverOverwriteEachOther() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    byte[] a = "archive of v1".getBytes(StandardCharsets.US_ASCII);
    byte[] b = "archive of v2, another object".getBytes(StandardCharsets.US_ASCII);
    List<String> registered = new ArrayList<>();
    try (FakeProxy proxy = new FakeProxy((req, out) -> FakeProxy.ok(
        req.requestLine.contains("/v1/model.mar?") ? a : b, "X-Dragonfly-Task-ID: t").respond(req, out))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        registered.add(r.url);
        return registered();
      });
      assertEquals(200, reg.handle(params("file_name", "v1/model.mar"), store.toString()).status);
      ModelRegistration.Outcome o = reg.handle(params("file_name", "v2/model.mar"), store.toString());
      assertEquals(200, o.status, o.body);
      String distinct = ArchiveNames.distinctName("s3://models/v2/model.mar", "model.mar");
      assertTrue(distinct.matches("p2p-[0-9a-f]{16}-model\\.mar"), distinct);
      assertEquals(Arrays.asList("model.mar", distinct), registered, "each registered from its own file");
      assertArrayEquals(a, Files.readAllBytes(store.resolve("model.mar")), "the v1 archive is untouched");
      assertArrayEquals(b, Files.readAllBytes(store.resolve(distinct)));
      assertEquals(Arrays.asList("model.mar", distinct), archives(store));

      // Each object keeps its name on the next POST (another registration, the operator asking again).
      registered.clear();
      assertEquals(200, reg.handle(params("file_name", "v2/model.mar"), store.toString()).status);
      assertEquals(200, reg.handle(params("file_name", "v1/model.mar"), store.toString()).status);
      assertEquals(Arrays.asList(distinct, "model.mar"), registered);
      assertArrayEquals(a, Files.readAllBytes(store.resolve("model.mar")));
      assertArrayEquals(b, Files.readAllBytes(store.resolve(distinct)));

      // The record outlives the plugin instance (TorchServe restarted on the same model store).
      registered.clear();
      ModelRegistration again = registration(writeConfig(proxy.uri().toString()), r -> {
        registered.add(r.url);
        return registered();
      });
      assertEquals(200, again.handle(params("file_name", "v2/model.mar"), store.toString()).status);
      assertEquals(Collections.singletonList(distinct), registered);
    }
  }

  @Test
  void aFileThePluginDidNotPlaceIsNeverOverwritten() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    byte[] byHand = "placed by an administrator".getBytes(StandardCharsets.US_ASCII);
    Files.write(store.resolve("tiny.mar"), byHand);
    AtomicReference<String> url = new AtomicReference<>();
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[3], "X-Dragonfly-Task-ID: t"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        url.set(r.url);
        return registered();
      });
      assertEquals(200, reg.handle(params("file_name", "team/tiny.mar"), store.toString()).status);
      assertEquals(ArchiveNames.distinctName("s3://models/team/tiny.mar", "tiny.mar"), url.get());
      assertArrayEquals(byHand, Files.readAllBytes(store.resolve("tiny.mar")));
    }
  }

  @Test
  void whenNeitherNameIsFreeTheAnswerIs409NamingBothObjects() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    String distinct = ArchiveNames.distinctName("s3://models/b/tiny.mar", "tiny.mar");
    Files.write(store.resolve("tiny.mar"), new byte[1]);
    Files.write(store.resolve(ArchiveNames.RECORD_PREFIX + "tiny.mar"),
        "s3://models/a/tiny.mar\n".getBytes(StandardCharsets.UTF_8));
    Files.write(store.resolve(distinct), new byte[2]);
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[3]))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> {
        throw new AssertionError("must not register");
      });
      ModelRegistration.Outcome o = reg.handle(params("file_name", "b/tiny.mar"), store.toString());
      assertEquals(409, o.status, o.body);
      String m = json(o).get("Status").getAsString();
      assertTrue(m.contains("s3://models/b/tiny.mar") && m.contains("tiny.mar holds s3://models/a/tiny.mar"), m);
      assertTrue(m.contains(distinct + " holds a file the plugin did not place"), m);
      assertEquals(0, proxy.received.size(), "nothing downloaded");
      assertEquals(1, Files.size(store.resolve("tiny.mar")));
      assertEquals(2, Files.size(store.resolve(distinct)));
    }
  }

  @Test
  void aFailedDownloadLeavesTheNameFree() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.status(404, "", "X-Dragonfly-Error-Type: backend"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> registered());
      assertEquals(404, reg.handle(params("file_name", "a/m.mar"), store.toString()).status);
      try (java.util.stream.Stream<Path> files = Files.list(store)) {
        assertEquals(0, files.count(), "no archive, no record");
      }
      proxy.script(FakeProxy.ok(new byte[1]));
      AtomicReference<String> url = new AtomicReference<>();
      ModelRegistration other = registration(writeConfig(proxy.uri().toString()), r -> {
        url.set(r.url);
        return registered();
      });
      assertEquals(200, other.handle(params("file_name", "b/m.mar"), store.toString()).status);
      assertEquals("m.mar", url.get(), "the name a failed download claimed is free again");
    }
  }

  @Test
  void anArchiveNameNearTheFileNameLimitStillGetsItsRecord() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    StringBuilder b = new StringBuilder();
    while (b.length() < 250) {
      b.append("long-name-");
    }
    String name = b.substring(0, 250) + ".mar"; // 254 bytes: a valid file name, its plain record name is not
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[3], "X-Dragonfly-Task-ID: t"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()), r -> registered());
      assertEquals(200, reg.handle(params("file_name", "a/" + name), store.toString()).status);
      assertTrue(Files.exists(store.resolve(name)));
      assertEquals("s3://models/a/" + name, ArchiveNames.owner(store, name));
      assertTrue(Files.exists(ArchiveNames.recordOf(store, name)));
    }
  }

  // ---- limits -----------------------------------------------------------------------------------------------

  @Test
  void anArchiveAboveMaxBytesIs413JsonNamingTheFieldAndTheFix() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[2048], "X-Dragonfly-Task-ID: t"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString(), "\"max_bytes\":\"1KiB\","), r -> {
        throw new AssertionError("must not register");
      });
      ModelRegistration.Outcome o = reg.handle(params("file_name", "big/m.mar"), store.toString());
      assertEquals(413, o.status, o.body);
      String m = json(o).get("Status").getAsString();
      assertTrue(m.contains("s3://models/big/m.mar is larger than max_bytes (1024 bytes)"), m);
      assertTrue(m.contains("raise \"max_bytes\" in the plugin configuration"), m);
      try (java.util.stream.Stream<Path> files = Files.list(store)) {
        assertEquals(0, files.count(), "nothing kept");
      }
    }
  }

  @Test
  void theArchiveIsFreedWhenTheRequestFails() throws Exception {
    Path store = Files.createDirectory(dir.resolve("store"));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.status(502, "", "X-Dragonfly-Error-Type: proxy"))) {
      ModelRegistration reg = registration(writeConfig(proxy.uri().toString()),
          r -> new Registrar.Result(200, "Model \"m\" Version: 1.0 registered with 0 initial workers"));
      assertEquals(502, reg.handle(params("file_name", "m.mar"), store.toString()).status);
      proxy.script(FakeProxy.ok(new byte[1]));
      assertEquals(200, reg.handle(params("file_name", "m.mar"), store.toString()).status);
    }
  }
}
