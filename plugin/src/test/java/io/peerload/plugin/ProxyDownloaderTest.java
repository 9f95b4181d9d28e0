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
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ProxyDownloaderTest {
  static final List<String> FILTER = Arrays.asList("X-Amz-Date", "X-Amz-Signature");
  static final String URL = "https://models.s3.us-east-1.amazonaws.com/a/b.mar?X-Amz-Date=1&X-Amz-Signature=2";

  @TempDir Path store;

  final ProxyDownloader downloader = new ProxyDownloader(2_000, 2_000);

  List<String> leftovers() throws IOException {
    try (Stream<Path> s = Files.list(store)) {
      return s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".part")).collect(Collectors.toList());
    }
  }

  @Test
  void filterHeadersAreBothSentJoinedDifferently() {
    Map<String, String> h = ProxyDownloader.filterHeaders(Arrays.asList("Expires", "Signature", "ns"));
    assertEquals("Expires,Signature,ns", h.get("X-Dragonfly-Filtered-Query-Params"));
    assertEquals("Expires&Signature&ns", h.get("X-Dragonfly-Filter"));
    assertTrue(ProxyDownloader.filterHeaders(Collections.emptyList()).isEmpty());
  }

  @Test
  void streamsThroughTheProxyWithHeadersAndRenames() throws Exception {
    byte[] body = new byte[3 * 1024 * 1024 + 17];
    new java.util.Random(1).nextBytes(body);
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(body, "X-Dragonfly-Task-ID: abc", "X-Dragonfly-Task-Download-Finished: true"))) {
      Map<String, String> headers = new LinkedHashMap<>();
      headers.put("X-Dragonfly-Tag", "v1");
      Path target = store.resolve("b.mar");
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, headers, FILTER, target, "s3://models/a/b.mar");
      assertEquals(body.length, r.bytes);
      assertArrayEquals(body, Files.readAllBytes(target));
      assertEquals("abc", r.taskId);
      assertEquals(Boolean.TRUE, r.localHit);
      FakeProxy.Received req = proxy.received.get(0);
      assertEquals("GET " + URL + " HTTP/1.1", req.requestLine, "absolute-form, even for https (no CONNECT)");
      assertEquals("models.s3.us-east-1.amazonaws.com", req.headers.get("Host"));
      assertEquals("X-Amz-Date,X-Amz-Signature", req.headers.get("X-Dragonfly-Filtered-Query-Params"));
      assertEquals("X-Amz-Date&X-Amz-Signature", req.headers.get("X-Dragonfly-Filter"));
      assertEquals("v1", req.headers.get("X-Dragonfly-Tag"));
      assertEquals("true", req.headers.get("X-Dragonfly-Use-P2P"), "P2P whatever the daemon's proxy.rules");
      assertTrue(leftovers().isEmpty());
    }
  }

  @Test
  void chunkedBodies() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> out.write(
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Dragonfly-Task-ID: t\r\n\r\n"
            + "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: x\r\n\r\n").getBytes(StandardCharsets.US_ASCII)))) {
      Path target = store.resolve("c.mar");
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x");
      assertEquals("hello world", new String(Files.readAllBytes(target), StandardCharsets.US_ASCII));
      assertEquals(Boolean.FALSE, r.localHit, "a task id without Download-Finished is not a local hit");
    }
  }

  /** The real daemon: a hit on a remote peer's cache carries the task id and nothing else. */
  @Test
  void remoteHitOrMissIsNotALocalHitAndNothingMore() throws Exception {
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[5], "X-Dragonfly-Task-ID: t1",
        "X-Dragonfly-Server-IP: 127.0.0.2"))) {
      ProxyDownloader.Result r = downloader.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("r.mar"), "x");
      assertEquals("t1", r.taskId);
      assertEquals(Boolean.FALSE, r.localHit);
      JsonObject body = JsonParser.parseString(Json.status("ok", r.taskId, r.localHit, null)).getAsJsonObject();
      assertFalse(body.getAsJsonPrimitive("LocalHit").getAsBoolean());
      assertFalse(body.has("CacheHit"), "no miss is claimed: the daemon does not tell a remote hit from a miss");
    }
    // Not through P2P at all (a daemon that forwarded it directly): nothing is known.
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(new byte[5]))) {
      ProxyDownloader.Result r = downloader.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("d.mar"), "x");
      assertNull(r.taskId);
      assertNull(r.localHit);
      assertEquals("{\"Status\":\"ok\"}", Json.status("ok", r.taskId, r.localHit, null));
    }
  }

  @Test
  void truncatedBodyIs502AndLeavesNothing() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> out.write(
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a few bytes".getBytes(StandardCharsets.US_ASCII)))) {
      Path target = store.resolve("t.mar");
      PluginException e = assertThrows(PluginException.class,
          () -> downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "s3://m/t.mar"));
      assertEquals(502, e.status());
      assertTrue(e.getMessage().contains("truncated"), e.getMessage());
      assertFalse(Files.exists(target));
      assertTrue(leftovers().isEmpty());
    }
  }

  @Test
  void truncatedChunkedBodyIs502() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> out.write(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort".getBytes(StandardCharsets.US_ASCII)))) {
      PluginException e = assertThrows(PluginException.class, () -> downloader.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("t.mar"), "x"));
      assertEquals(502, e.status());
      assertTrue(leftovers().isEmpty());
    }
  }

  @Test
  void existingFileIsKeptWhenADownloadFails() throws Exception {
    Path target = store.resolve("keep.mar");
    Files.write(target, "old".getBytes(StandardCharsets.US_ASCII));
    try (FakeProxy proxy = new FakeProxy(FakeProxy.status(500, "boom", "X-Dragonfly-Error-Type: backend"))) {
      assertThrows(PluginException.class,
          () -> downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x"));
    }
    assertEquals("old", new String(Files.readAllBytes(target), StandardCharsets.US_ASCII));
  }

  // ---- error mapping ---------------------------------------------------------------------------------------

  PluginException fail(FakeProxy.Script script) throws Exception {
    try (FakeProxy proxy = new FakeProxy(script)) {
      return assertThrows(PluginException.class, () -> downloader.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("e.mar"), "s3://models/a/b.mar"));
    }
  }

  @Test
  void notFoundIs404() throws Exception {
    PluginException e = fail(FakeProxy.status(404, "<Error><Code>NoSuchKey</Code></Error>", "X-Dragonfly-Error-Type: backend"));
    assertEquals(404, e.status());
    assertTrue(e.getMessage().contains("s3://models/a/b.mar not found"), e.getMessage());
    assertTrue(e.getMessage().contains("NoSuchKey"), e.getMessage());
  }

  /** The real daemon passes the origin's status and headers on, with an empty body. */
  @Test
  void originErrorsWithAnEmptyBodyAreExplainedFromTheStatus() throws Exception {
    PluginException nf = fail(FakeProxy.status(404, "", "X-Dragonfly-Error-Type: backend"));
    assertEquals(404, nf.status());
    assertTrue(nf.getMessage().startsWith(
        "s3://models/a/b.mar not found: the origin answered 404 through the peer proxy at http://127.0.0.1:"),
        nf.getMessage());
    assertTrue(nf.getMessage().endsWith(" (no body is passed on)"), nf.getMessage());

    PluginException refused = fail(FakeProxy.status(403, "", "X-Dragonfly-Error-Type: backend"));
    assertEquals(502, refused.status());
    assertEquals("backend", refused.errorType());
    assertTrue(refused.getMessage().startsWith("the origin answered 403 through the peer proxy at http://127.0.0.1:"),
        refused.getMessage());
    assertTrue(refused.getMessage().contains("(no body is passed on): the signed URL for s3://models/a/b.mar was "
        + "refused — check the credentials, the bucket policy and the clock"), refused.getMessage());
    assertFalse(refused.getMessage().contains("X-Amz-Signature"), "the signed URL is never echoed");

    assertEquals(503, fail(FakeProxy.status(503, "", "X-Dragonfly-Error-Type: backend")).status());
    PluginException bad = fail(FakeProxy.status(400, "", "X-Dragonfly-Error-Type: backend"));
    assertEquals(502, bad.status());
    assertTrue(bad.getMessage().contains("check the endpoint, region and bucket"), bad.getMessage());
  }

  @Test
  void aProxyTypeForbiddenIsTheDaemonsBlocklistNotTheOrigin() throws Exception {
    PluginException e = fail(FakeProxy.status(403, "", "X-Dragonfly-Error-Type: proxy"));
    assertEquals(502, e.status());
    assertEquals("proxy", e.errorType());
    assertTrue(e.getMessage().contains("blocklist"), e.getMessage());
    assertFalse(e.getMessage().contains("credentials"), e.getMessage());
  }

  @Test
  void forbiddenIs502WithTheStorageErrorCodeOnly() throws Exception {
    PluginException e = fail(FakeProxy.status(403,
        "<Error><Code>SignatureDoesNotMatch</Code><StringToSign>AWS4-HMAC-SHA256 secret-ish</StringToSign></Error>",
        "X-Dragonfly-Error-Type: backend"));
    assertEquals(502, e.status());
    assertEquals("backend", e.errorType());
    assertTrue(e.getMessage().contains("SignatureDoesNotMatch"), e.getMessage());
    assertFalse(e.getMessage().contains("StringToSign"), e.getMessage());
    assertFalse(e.getMessage().contains("X-Amz-Signature"), "the signed URL is never echoed");
  }

  @Test
  void proxyErrorTypeIsSurfaced() throws Exception {
    PluginException e = fail(FakeProxy.status(500, "", "X-Dragonfly-Error-Type: dfdaemon"));
    assertEquals(502, e.status());
    assertEquals("dfdaemon", e.errorType());
    PluginException other = fail(FakeProxy.status(206, ""));
    assertEquals(502, other.status());
    assertNull(other.errorType());
  }

  @Test
  void deadProxyIs502() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    PluginException e = assertThrows(PluginException.class, () -> downloader.download(
        URI.create("http://127.0.0.1:" + port), URL, Collections.emptyMap(), FILTER, store.resolve("d.mar"), "x"));
    assertEquals(502, e.status());
    assertTrue(e.getMessage().contains("unreachable"), e.getMessage());
  }

  @Test
  void silentProxyTimesOutAs502() throws Exception {
    PluginException e = fail((req, out) -> {
      try {
        Thread.sleep(4_000);
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
      }
    });
    assertEquals(502, e.status());
    assertTrue(e.getMessage().contains("no response"), e.getMessage());
  }

  @Test
  void garbageIs502() throws Exception {
    assertEquals(502, fail((req, out) -> out.write("SSH-2.0-OpenSSH\r\n\r\n".getBytes(StandardCharsets.US_ASCII))).status());
  }

  @Test
  void unknownProxyHostIs502() throws Exception {
    PluginException e = assertThrows(PluginException.class, () -> downloader.download(
        URI.create("http://no-such-proxy.invalid:65000"), URL, Collections.emptyMap(), FILTER, store.resolve("u.mar"),
        "x"));
    assertEquals(502, e.status());
    assertTrue(e.getMessage().contains("unknown host no-such-proxy.invalid"), e.getMessage());
  }
}
