package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Clock;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The hard-link path of {@link ProxyDownloader} against a fake proxy that behaves as dragonfly-client 1.4.2's does
 * with {@code X-Dragonfly-Output-Path} + {@code X-Dragonfly-Force-Hard-Link: true}: it links its cached file to the
 * path before answering (a held task: the complete file; a task it does not hold: a file it has only allocated and
 * fills piece by piece as it sends them), or answers 500 {@code dfdaemon} when the link fails.
 */
class HardLinkDownloadTest {
  static final String URL = "https://models.s3.us-east-1.amazonaws.com/a/b.mar?X-Amz-Date=1&X-Amz-Signature=2";
  static final List<String> FILTER = Arrays.asList("X-Amz-Date", "X-Amz-Signature");
  static final String WHAT = "s3://models/a/b.mar";

  @TempDir Path store;
  @TempDir Path daemon;

  /**
   * As in a model server that can neither write the daemon's file nor make it writable (TorchServe as a non-root
   * user other than the daemon's): these tests run as whatever user the build has, root included.
   */
  static final ReadOnlyLink.Check SAFE = link -> null;

  final ProxyDownloader downloader = new ProxyDownloader(2_000, 2_000,
      tmp -> FileChannel.open(tmp, StandardOpenOption.WRITE), SAFE);
  final byte[] content = new byte[1024 * 1024 + 3];
  Path cached;

  @BeforeEach
  void cache() throws IOException {
    new Random(7).nextBytes(content);
    cached = Files.write(daemon.resolve("task-content"), content);
  }

  /** Everything in the model store: no link, temporary file or partial archive may be left over. */
  List<String> storeFiles() throws IOException {
    try (Stream<Path> s = Files.list(store)) {
      return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
    }
  }

  static String head(int status, long length, String... headers) {
    StringBuilder h = new StringBuilder("HTTP/1.1 " + status + " X\r\nContent-Length: " + length + "\r\n");
    for (String x : headers) {
      h.append(x).append("\r\n");
    }
    return h.append("\r\n").toString();
  }

  /** Links {@code from} to the requested output path, as the daemon does, when the request asks for it. */
  static void linkIfAsked(FakeProxy.Received req, Path from) throws IOException {
    String out = req.headers.get("X-Dragonfly-Output-Path");
    if (out != null) {
      Files.createLink(Paths.get(out), from);
    }
  }

  /**
   * A proxy answering for a task the daemon does not hold yet, as client 1.4.2 does: it links {@code file} (the one it
   * allocated) when asked, sends the head without {@code Download-Finished}, then {@code body} sends.
   */
  FakeProxy downloadingInto(Path file, FakeProxy.Script body) throws IOException {
    return new FakeProxy((req, out) -> {
      linkIfAsked(req, file);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1").getBytes(StandardCharsets.US_ASCII));
      body.respond(req, out);
    });
  }

  @Test
  void aLocalHitIsTheDaemonsFileAndTheBodyIsNotRead() throws Exception {
    // The body never comes: a client that read it would stall for the read time-out (2 s) and fail.
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, cached);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      sleep(3_000);
    })) {
      Path target = store.resolve("b.mar");
      long start = System.nanoTime();
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      long millis = (System.nanoTime() - start) / 1_000_000;
      assertTrue(millis < 1_500, "returned after the head, without reading the body: " + millis + " ms");
      assertEquals(Boolean.TRUE, r.hardLink);
      assertNull(r.hardLinkFallback);
      assertEquals(Boolean.TRUE, r.localHit);
      assertEquals(content.length, r.bytes);
      assertTrue(Files.isSameFile(cached, target), "the archive is the daemon's inode");
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(Collections.singletonList("b.mar"), storeFiles());
      FakeProxy.Received req = proxy.received.get(0);
      String out = req.headers.get("X-Dragonfly-Output-Path");
      assertTrue(out.startsWith(store + "/.p2p-") && out.endsWith(".link"), out);
      assertEquals("true", req.headers.get("X-Dragonfly-Force-Hard-Link"));
      assertEquals(1, proxy.received.size());
    }
  }

  @Test
  void aLinkTheModelServerCouldWriteIsNotUsedAndTheDaemonsFileIsLeftAsItWas() throws Exception {
    String why = "the model server runs with CAP_DAC_OVERRIDE (as root does)";
    String modeBefore = PosixFilePermissions.toString(Files.getPosixFilePermissions(cached));
    List<Path> checked = new java.util.ArrayList<>();
    ProxyDownloader writable = new ProxyDownloader(2_000, 2_000,
        tmp -> FileChannel.open(tmp, StandardOpenOption.WRITE), link -> {
          checked.add(link);
          return why;
        });
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, cached);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(content);
    })) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          writable.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      assertEquals(Boolean.FALSE, r.hardLink);
      assertEquals(why, r.hardLinkFallback);
      assertEquals(1, checked.size(), "asked about the daemon's link once");
      assertTrue(checked.get(0).getFileName().toString().endsWith(".link"), checked.toString());
      assertFalse(Files.isSameFile(cached, target), "the archive is a copy, not the daemon's inode");
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(Collections.singletonList("b.mar"), storeFiles(), "the daemon's link is gone");
      assertEquals(modeBefore, PosixFilePermissions.toString(Files.getPosixFilePermissions(cached)),
          "the daemon's file keeps its mode");
      assertArrayEquals(content, Files.readAllBytes(cached));
      assertEquals(1, proxy.received.size(), "the body of the same answer is streamed");
    }
  }

  @Test
  void anArchiveAboveMaxBytesIsRefusedAndTheDaemonsLinkRemoved() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, cached);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(content);
    })) {
      PluginException e = assertThrows(PluginException.class, () -> downloader.download(proxy.uri(), URL,
          Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, store.toString(), content.length - 1,
          60_000));
      assertEquals(413, e.status());
      assertTrue(e.getMessage().contains("max_bytes"), e.getMessage());
      assertTrue(storeFiles().isEmpty(), storeFiles().toString());
      assertArrayEquals(content, Files.readAllBytes(cached));
    }
  }

  @Test
  void theDaemonsViewOfTheStoreNamesTheOutputPath() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      String asked = req.headers.get("X-Dragonfly-Output-Path");
      assertTrue(asked.startsWith("/var/lib/dragonfly/stores/pod-0/.p2p-"), asked);
      // the same directory under another name in this process
      Files.createLink(store.resolve(asked.substring(asked.lastIndexOf('/') + 1)), cached);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
    })) {
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER,
          store.resolve("b.mar"), WHAT, "/var/lib/dragonfly/stores/pod-0/");
      assertEquals(Boolean.TRUE, r.hardLink);
      assertTrue(Files.isSameFile(cached, store.resolve("b.mar")));
    }
  }

  @Test
  void aTaskTheDaemonIsDownloadingIsTakenOnceTheBodyIsWholeWithNothingWritten() throws Exception {
    // The daemon allocates the task's file at full size, links it, and writes each piece before it sends it.
    Path filling = Files.write(daemon.resolve("filling"), new byte[content.length]);
    try (FakeProxy proxy = downloadingInto(filling, (req, out) -> {
      try (FileChannel f = FileChannel.open(filling, StandardOpenOption.WRITE)) {
        for (int at = 0; at < content.length; at += 64 * 1024) {
          int n = Math.min(64 * 1024, content.length - at);
          f.write(java.nio.ByteBuffer.wrap(content, at, n), at);
          out.write(content, at, n);
        }
      }
    })) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      assertEquals(Boolean.TRUE, r.hardLink);
      assertEquals(Boolean.FALSE, r.localHit, "the daemon did not hold it: not a local hit");
      assertEquals(content.length, r.bytes);
      assertTrue(Files.isSameFile(filling, target), "the archive is the daemon's file");
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(Collections.singletonList("b.mar"), storeFiles(), "no temporary file was written");
      assertEquals(1, proxy.received.size());
    }
  }

  @Test
  void aLinkedFileThatDoesNotMatchTheBodyIsNotTakenAndTheArchiveIsDownloadedAgain() throws Exception {
    // A daemon that linked a placeholder and filled another file: the body's samples are not in the link.
    Path placeholder = Files.write(daemon.resolve("placeholder"), new byte[content.length]);
    try (FakeProxy proxy = downloadingInto(placeholder, (req, out) -> {
      out.write(content);
    })) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      assertEquals(Boolean.FALSE, r.hardLink);
      assertTrue(r.hardLinkFallback.contains("differs from the body at byte 0"), r.hardLinkFallback);
      assertArrayEquals(content, Files.readAllBytes(target), "the streamed bytes, not the placeholder");
      assertFalse(Files.isSameFile(placeholder, target));
      assertEquals(Collections.singletonList("b.mar"), storeFiles());
      assertTrue(Files.exists(placeholder), "removing the link never touches the daemon's file");
      assertEquals(2, proxy.received.size(), "the body was used up: a second request, without the link");
      assertFalse(proxy.received.get(1).headers.containsKey("X-Dragonfly-Output-Path"));
    }
  }

  @Test
  void aLinkedFileWrongOnlyInItsLastBlockIsNotTaken() throws Exception {
    byte[] lastWrong = content.clone();
    lastWrong[lastWrong.length - 1] ^= 1;
    Path filled = Files.write(daemon.resolve("filled"), lastWrong);
    try (FakeProxy proxy = downloadingInto(filled, (req, out) -> {
      out.write(content);
    })) {
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER,
          store.resolve("b.mar"), WHAT, store.toString());
      assertEquals(Boolean.FALSE, r.hardLink);
      assertTrue(r.hardLinkFallback.contains("differs from the body at byte " + (content.length - 4096)),
          r.hardLinkFallback);
      assertArrayEquals(content, Files.readAllBytes(store.resolve("b.mar")));
    }
  }

  @Test
  void aTruncatedBodyOfATaskBeingDownloadedLeavesNoLink() throws Exception {
    Path filling = Files.write(daemon.resolve("filling"), new byte[content.length]);
    try (FakeProxy proxy = downloadingInto(filling, (req, out) -> {
      out.write(content, 0, content.length / 2);
    })) {
      PluginException e = assertThrows(PluginException.class, () -> downloader.download(proxy.uri(), URL,
          Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, store.toString()));
      assertEquals(502, e.status());
      assertTrue(e.getMessage().contains("truncated: received " + content.length / 2), e.getMessage());
      assertTrue(storeFiles().isEmpty(), storeFiles().toString());
      assertTrue(Files.exists(filling));
    }
  }

  @Test
  void aRefusedLinkFallsBackToAPlainDownload() throws Exception {
    // What client 1.4.2 answers when link(2) fails (EXDEV across file systems, EACCES, a missing directory).
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      if (req.headers.containsKey("X-Dragonfly-Output-Path")) {
        out.write(head(500, 0, "X-Dragonfly-Error-Type: dfdaemon").getBytes(StandardCharsets.US_ASCII));
      } else {
        out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
            .getBytes(StandardCharsets.US_ASCII));
        out.write(content);
      }
    })) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, "/elsewhere");
      assertEquals(Boolean.FALSE, r.hardLink);
      assertTrue(r.hardLinkFallback.contains("dfdaemon"), r.hardLinkFallback);
      assertEquals(Boolean.TRUE, r.localHit);
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(2, proxy.received.size());
      assertFalse(proxy.received.get(1).headers.containsKey("X-Dragonfly-Output-Path"));
      assertFalse(proxy.received.get(1).headers.containsKey("X-Dragonfly-Force-Hard-Link"));
      assertEquals(Collections.singletonList("b.mar"), storeFiles());
    }
  }

  @Test
  void aDaemonThatIgnoresTheHeaderIsStreamed() throws Exception {
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(content, "X-Dragonfly-Task-ID: t1",
        "X-Dragonfly-Task-Download-Finished: true"))) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      assertEquals(Boolean.FALSE, r.hardLink);
      assertTrue(r.hardLinkFallback.contains("made no file"), r.hardLinkFallback);
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(1, proxy.received.size());
      assertEquals(Collections.singletonList("b.mar"), storeFiles());
    }
  }

  @Test
  void aFileOfAnotherSizeIsNotTaken() throws Exception {
    Path shorter = Files.write(daemon.resolve("shorter"), Arrays.copyOf(content, 10));
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, shorter);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
      out.write(content);
    })) {
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r =
          downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, WHAT, store.toString());
      assertEquals(Boolean.FALSE, r.hardLink);
      assertTrue(r.hardLinkFallback.contains("10 bytes"), r.hardLinkFallback);
      assertArrayEquals(content, Files.readAllBytes(target));
      assertEquals(Collections.singletonList("b.mar"), storeFiles());
      assertEquals(10, Files.size(shorter));
    }
  }

  @Test
  void anOriginErrorIsReportedOnceAndLeavesNothing() throws Exception {
    try (FakeProxy proxy = new FakeProxy(FakeProxy.status(404, "", "X-Dragonfly-Error-Type: backend"))) {
      PluginException e = assertThrows(PluginException.class, () -> downloader.download(proxy.uri(), URL,
          Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, store.toString()));
      assertEquals(404, e.status());
      assertEquals(1, proxy.received.size(), "the origin's answer would be the same without a link");
      assertTrue(storeFiles().isEmpty());
    }
  }

  @Test
  void aTruncatedFallbackLeavesNothing() throws Exception {
    Path allocated = Files.write(daemon.resolve("allocated"), new byte[content.length]);
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, allocated);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1").getBytes(StandardCharsets.US_ASCII));
      out.write(content, 0, 1000);
    })) {
      PluginException e = assertThrows(PluginException.class, () -> downloader.download(proxy.uri(), URL,
          Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, store.toString()));
      assertEquals(502, e.status());
      assertTrue(storeFiles().isEmpty(), storeFiles().toString());
    }
  }

  // ---- configuration and answer ----------------------------------------------------------------------------

  static final String S3 = "\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"models\",\"region\":\"us-east-1\","
      + "\"access_key\":\"AKIAIOSFODNN7EXAMPLE\",\"secret_key\":\"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"}";

  static PluginConfig config(String hardLinkDir, Map<String, String> env) throws ConfigException {
    return PluginConfig.parse("{\"hard_link_dir\":" + hardLinkDir + "," + S3 + "}", "config.json", Paths.get("."), env);
  }

  @Test
  void hardLinkDirIsOffByDefaultAndExpandsTheEnvironment() throws Exception {
    assertNull(PluginConfig.parse("{" + S3 + "}", "config.json", Paths.get(".")).hardLinkDir());
    Map<String, String> env = new HashMap<>();
    env.put("POD_NAME", "ts-0");
    assertEquals("/var/lib/dragonfly/stores/ts-0", config("\"/var/lib/dragonfly/stores/${POD_NAME}/\"", env).hardLinkDir());
    assertTrue(config("\"/m\"", env).toString().contains("hard_link_dir=/m"));
  }

  @Test
  void badHardLinkDirsNameTheFieldAndTheFix() {
    Map<String, String> env = Collections.emptyMap();
    String unset = assertThrows(ConfigException.class, () -> config("\"/stores/${POD_NAME}\"", env)).getMessage();
    assertTrue(unset.contains("\"hard_link_dir\"") && unset.contains("${POD_NAME}") && unset.contains("not set"),
        unset);
    String relative = assertThrows(ConfigException.class, () -> config("\"model-store\"", env)).getMessage();
    assertTrue(relative.contains("\"hard_link_dir\" must be an absolute path"), relative);
    assertTrue(assertThrows(ConfigException.class, () -> config("\"/a/../b\"", env)).getMessage().contains("'..'"));
    assertTrue(assertThrows(ConfigException.class, () -> config("\"/a/${1X}\"", env)).getMessage()
        .contains("${NAME}"));
    assertTrue(assertThrows(ConfigException.class, () -> config("\"/a\\nb\"", env)).getMessage()
        .contains("control characters"));
    assertTrue(assertThrows(ConfigException.class, () -> config("{}", env)).getMessage()
        .contains("\"hard_link_dir\" must be a string"));
    String header = assertThrows(ConfigException.class, () -> PluginConfig.parse(
        "{\"header\":{\"X-Dragonfly-Output-Path\":\"/x\"}," + S3 + "}", "config.json", Paths.get("."))).getMessage();
    assertTrue(header.contains("header.X-Dragonfly-Output-Path"), header);
  }

  @Test
  void theAnswerSaysWhetherTheArchiveIsAHardLink() throws Exception {
    Path cfgDir = Files.createDirectory(daemon.resolve("cfg"));
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      linkIfAsked(req, cached);
      out.write(head(200, content.length, "X-Dragonfly-Task-ID: t1", "X-Dragonfly-Task-Download-Finished: true")
          .getBytes(StandardCharsets.US_ASCII));
    })) {
      Path cfg = Files.write(cfgDir.resolve("config.json"), ("{\"addr\":\"" + proxy.uri() + "\",\"hard_link_dir\":\""
          + store + "\"," + S3 + "}").getBytes(StandardCharsets.UTF_8));
      ModelRegistration reg = new ModelRegistration(new ConfigSource(cfg), downloader,
          r -> {
            try {
              assertTrue(Files.isSameFile(cached, store.resolve("b.mar")), "registered from the daemon's file");
            } catch (IOException e) {
              throw new AssertionError(e);
            }
            return new Registrar.Result(200, "Model \"b\" Version: 1.0 registered with 0 initial workers.");
          },
          Clock.fixed(Instant.parse("2026-01-15T08:00:00Z"), ZoneOffset.UTC));
      ModelRegistration.Outcome o =
          reg.handle(Collections.singletonMap("file_name", Collections.singletonList("a/b.mar")), store.toString());
      assertEquals(200, o.status, o.body);
      JsonObject body = JsonParser.parseString(o.body).getAsJsonObject();
      assertTrue(body.get("HardLink").getAsBoolean());
      assertTrue(body.get("LocalHit").getAsBoolean());
      assertFalse(JsonParser.parseString(Json.status("x", "t", true, null)).getAsJsonObject().has("HardLink"),
          "no HardLink when none was asked for");
    }
  }

  static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
