package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The pipelined copy behind every download (socket reads and file writes overlap on two threads,
 * {@link PipelinedCopy}), driven through {@link ProxyDownloader} against a fake peer proxy: large and chunked
 * bodies intact, time-outs, read and write failures stopping both sides, memory bounded whatever the object size.
 */
class PipelinedCopyTest {
  static final List<String> FILTER = ProxyDownloaderTest.FILTER;
  static final String URL = ProxyDownloaderTest.URL;

  @TempDir Path store;

  final ProxyDownloader downloader = new ProxyDownloader(2_000, 2_000);

  List<String> leftovers() throws IOException {
    try (Stream<Path> s = Files.list(store)) {
      return s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".part")).collect(Collectors.toList());
    }
  }

  PluginException fail(FakeProxy.Script script) throws Exception {
    try (FakeProxy proxy = new FakeProxy(script)) {
      return assertThrows(PluginException.class, () -> downloader.download(
          proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("e.mar"), "s3://models/a/b.mar"));
    }
  }


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
