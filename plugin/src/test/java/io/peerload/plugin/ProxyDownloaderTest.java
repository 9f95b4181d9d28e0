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
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
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

  // ---- the pipelined copy (socket reads and file writes overlap on two threads) ---------------------------

  static final int MiB = 1024 * 1024;

  static byte[] random(int size, long seed) {
    byte[] b = new byte[size];
    new Random(seed).nextBytes(b);
    return b;
  }

  static byte[] sha256(byte[] b) throws Exception {
    return MessageDigest.getInstance("SHA-256").digest(b);
  }

  /** Fails unless every writer thread has ended: the copy must join it whatever happened. */
  static void assertNoWriterThread() {
    List<String> alive = Thread.getAllStackTraces().keySet().stream()
        .filter(t -> t.isAlive() && t.getName().equals(PipelinedCopy.WRITER_THREAD))
        .map(Thread::toString)
        .collect(Collectors.toList());
    assertEquals(Collections.emptyList(), alive);
  }

  /** Head with a Content-Length, then {@code sent} bytes of the body, then {@code then}. */
  static FakeProxy.Script partial(long contentLength, byte[] sent, FakeProxy.Script then) {
    return (req, out) -> {
      String head = "HTTP/1.1 200 OK\r\nContent-Length: " + contentLength + "\r\n\r\n";
      out.write(head.getBytes(StandardCharsets.US_ASCII));
      out.write(sent);
      out.flush();
      then.respond(req, out);
    };
  }

  static FakeProxy.Script sleep(long millis) {
    return (req, out) -> {
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    };
  }

  /** Runs before each write of the temporary file; {@code written} is what was written so far. */
  interface BeforeWrite {
    void run(ByteBuffer src, long written) throws IOException;
  }

  /** The temporary file's channel with a hook before each write (a slow or failing disk, allocation probes). */
  static final class HookedFile implements WritableByteChannel {
    final FileChannel ch;
    final BeforeWrite before;
    volatile long written;

    HookedFile(Path tmp, BeforeWrite before) throws IOException {
      this.ch = FileChannel.open(tmp, StandardOpenOption.WRITE);
      this.before = before;
    }

    @Override
    public int write(ByteBuffer src) throws IOException {
      before.run(src, written);
      int n = ch.write(src);
      written += n;
      return n;
    }

    @Override
    public boolean isOpen() {
      return ch.isOpen();
    }

    @Override
    public void close() throws IOException {
      ch.close();
    }
  }

  /** A disk that fails with ENOSPC's message once {@code failAt} bytes were written. */
  static HookedFile failingFile(Path tmp, long failAt) throws IOException {
    return new HookedFile(tmp, (src, written) -> {
      if (written + src.remaining() > failAt) {
        throw new IOException("No space left on device");
      }
    });
  }

  @Test
  void largeBodyArrivesIntact() throws Exception {
    // Not a multiple of the buffers, so the last one is partial.
    byte[] body = random(48 * MiB + 12_345, 7);
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(body))) {
      Path target = store.resolve("big.mar");
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x");
      assertEquals(body.length, r.bytes);
      assertArrayEquals(sha256(body), sha256(Files.readAllBytes(target)));
    }
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void largeChunkedBodyArrivesIntact() throws Exception {
    byte[] body = random(20 * MiB + 3, 8);
    Random sizes = new Random(9);
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      // Chunks from 1 byte to past a copy buffer, so chunk ends and buffer ends fall everywhere.
      for (int off = 0; off < body.length;) {
        int n = Math.min(body.length - off, 1 + sizes.nextInt(PipelinedCopy.BUFFER_SIZE + 100_000));
        out.write((Integer.toHexString(n) + "\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(body, off, n);
        out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
        off += n;
      }
      out.write("0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
    })) {
      Path target = store.resolve("chunked.mar");
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x");
      assertEquals(body.length, r.bytes);
      assertArrayEquals(sha256(body), sha256(Files.readAllBytes(target)));
    }
    assertNoWriterThread();
  }

  @Test
  void bytesPastTheContentLengthAreNotWritten() throws Exception {
    byte[] body = random(PipelinedCopy.BUFFER_SIZE + 10, 10);
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write(("HTTP/1.1 200 OK\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(body);
      out.write("garbage after the body".getBytes(StandardCharsets.US_ASCII));
    })) {
      Path target = store.resolve("exact.mar");
      ProxyDownloader.Result r = downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x");
      assertEquals(body.length, r.bytes);
      assertArrayEquals(body, Files.readAllBytes(target));
    }
  }

  @Test
  void largeTruncatedBodyIsReportedWithItsCounts() throws Exception {
    byte[] half = random(20 * MiB, 11);
    PluginException e = fail(partial(40L * MiB, half, (r, o) -> { }));
    assertEquals(502, e.status());
    assertTrue(e.getMessage().endsWith("was truncated: received " + 20 * MiB + " of " + 40 * MiB + " bytes"),
        e.getMessage());
    assertFalse(Files.exists(store.resolve("e.mar")));
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void stalledBodyHitsTheReadTimeout() throws Exception {
    ProxyDownloader quick = new ProxyDownloader(2_000, 500);
    byte[] part = random(3 * MiB, 12);
    try (FakeProxy proxy = new FakeProxy(partial(10L * MiB, part, sleep(3_000)))) {
      long t0 = System.nanoTime();
      PluginException e = assertThrows(PluginException.class, () -> quick.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("s.mar"), "s3://models/a/b.mar"));
      long ms = (System.nanoTime() - t0) / 1_000_000;
      assertEquals(502, e.status());
      assertEquals("download of s3://models/a/b.mar stalled: no data from the peer proxy at " + proxy.uri()
          + " for a read time-out (after " + 3 * MiB + " bytes)", e.getMessage());
      assertTrue(ms >= 450 && ms < 2_500, "timed out after " + ms + " ms");
    }
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void aSlowButSteadyBodyNeverTimesOut() throws Exception {
    // The idle time-out is per read, as with SO_TIMEOUT: a body that keeps coming never times out.
    ProxyDownloader quick = new ProxyDownloader(2_000, 300);
    byte[] body = random(64 * 1024, 13);
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write(("HTTP/1.1 200 OK\r\nContent-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      for (int off = 0; off < body.length; off += 8 * 1024) {
        out.write(body, off, 8 * 1024);
        out.flush();
        sleep(100).respond(req, out);
      }
    })) {
      Path target = store.resolve("slow.mar");
      quick.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x");
      assertArrayEquals(body, Files.readAllBytes(target));
    }
  }

  @Test
  void connectionResetMidBodyIs502WithTheCount() throws Exception {
    byte[] part = random(PipelinedCopy.BUFFER_SIZE * 3 + 5, 14);
    PluginException e = fail((req, out) -> {
      out.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      out.write((Integer.toHexString(part.length * 2) + "\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(part);
    });
    assertEquals(502, e.status());
    assertEquals("download of s3://models/a/b.mar failed after " + part.length + " bytes: connection closed early",
        e.getMessage());
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void readFailureStopsTheWriterBeforeReturning() throws Exception {
    // A slow disk: the reader is buffers ahead when the connection breaks. The writer must drop what is queued
    // and have ended by the time download() throws.
    HookedFile[] file = {null};
    ProxyDownloader slow = new ProxyDownloader(2_000, 2_000,
        tmp -> file[0] = new HookedFile(tmp, (src, written) -> sleep(100).respond(null, null)));
    byte[] part = random(PipelinedCopy.HANDOFF * 2 * PipelinedCopy.BUFFERS, 18);
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      out.write((Integer.toHexString(part.length + 1) + "\r\n").getBytes(StandardCharsets.US_ASCII));
      out.write(part);
    })) {
      PluginException e = assertThrows(PluginException.class, () -> slow.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("r.mar"), "x"));
      assertEquals(502, e.status());
      assertEquals("download of x failed after " + part.length + " bytes: connection closed early", e.getMessage());
      assertNoWriterThread();
      assertTrue(file[0].written < part.length, "the buffers queued at the failure were written anyway");
    }
    assertTrue(leftovers().isEmpty());
  }

  @Test
  void writeFailureIs500AndStopsTheDownload() throws Exception {
    ProxyDownloader failing = new ProxyDownloader(2_000, 2_000, tmp -> failingFile(tmp, 5L * MiB));
    byte[] body = random(32 * MiB, 15);
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(body))) {
      Path target = store.resolve("w.mar");
      PluginException e = assertThrows(PluginException.class,
          () -> failing.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, target, "x"));
      assertEquals(500, e.status());
      assertEquals("cannot write " + target + ": IOException: No space left on device", e.getMessage());
      assertFalse(Files.exists(target));
    }
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void writeFailureWakesAReadWaitingForTheNetwork() throws Exception {
    // The proxy sends two buffers' worth, then nothing for far longer than the test allows: the first write fails
    // while the reader waits for data, and must not wait for the (long) read time-out.
    ProxyDownloader failing = new ProxyDownloader(2_000, 60_000, tmp -> failingFile(tmp, 0));
    byte[] part = random(PipelinedCopy.BUFFER_SIZE * 2, 16);
    try (FakeProxy proxy = new FakeProxy(partial(100L * MiB, part, sleep(20_000)))) {
      long t0 = System.nanoTime();
      PluginException e = assertThrows(PluginException.class, () -> failing.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("w.mar"), "x"));
      long ms = (System.nanoTime() - t0) / 1_000_000;
      assertEquals(500, e.status());
      assertTrue(e.getMessage().endsWith("No space left on device"), e.getMessage());
      assertTrue(ms < 5_000, "the download ended " + ms + " ms after the write failed");
    }
    assertTrue(leftovers().isEmpty());
    assertNoWriterThread();
  }

  @Test
  void heapUseDoesNotGrowWithTheObject() throws Exception {
    // Allocation, not heap size (which GC timing makes noisy): the reader's (this thread) and the writer's over
    // a 64 MiB download stay far below the object's size.
    com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
    long[] writerAllocated = {-1, -1};
    ProxyDownloader measured = new ProxyDownloader(2_000, 2_000, tmp -> new HookedFile(tmp, (src, written) -> {
      long a = threads.getThreadAllocatedBytes(Thread.currentThread().getId());
      if (writerAllocated[0] < 0) {
        writerAllocated[0] = a;
      }
      writerAllocated[1] = a;
    }));
    int size = 64 * MiB;
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write(("HTTP/1.1 200 OK\r\nContent-Length: " + size + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
      byte[] block = random(MiB, 17);
      for (int i = 0; i < size / MiB; i++) {
        out.write(block);
      }
    })) {
      long self = Thread.currentThread().getId();
      long before = threads.getThreadAllocatedBytes(self);
      measured.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("m.mar"), "x");
      long reader = threads.getThreadAllocatedBytes(self) - before;
      long writer = writerAllocated[1] - writerAllocated[0];
      assertTrue(reader < 4 * MiB, "the reader allocated " + reader + " bytes for a " + size + "-byte object");
      assertTrue(writer < MiB, "the writer allocated " + writer + " bytes for a " + size + "-byte object");
    }
    assertEquals(size, Files.size(store.resolve("m.mar")));
  }
}
