package io.peerload.plugin;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code max_bytes} and {@code download_timeout}: a body larger than the bound, announced or not, and a body that
 * never ends are stopped with an answer that names the field, and nothing of them stays in the model store.
 */
class DownloadLimitsTest {
  static final List<String> FILTER = Arrays.asList("X-Amz-Date", "X-Amz-Signature");
  static final String URL = "https://models.s3.us-east-1.amazonaws.com/a/b.mar?X-Amz-Date=1&X-Amz-Signature=2";
  static final String WHAT = "s3://models/a/b.mar";

  @TempDir Path store;

  /** Bytes written to the temporary file, whatever happens to it afterwards. */
  final AtomicLong written = new AtomicLong();

  final ProxyDownloader downloader = new ProxyDownloader(2_000, 2_000, tmp -> {
    FileChannel f = FileChannel.open(tmp, StandardOpenOption.WRITE);
    return new WritableByteChannel() {
      @Override
      public int write(ByteBuffer src) throws IOException {
        int n = f.write(src);
        written.addAndGet(n);
        return n;
      }

      @Override
      public boolean isOpen() {
        return f.isOpen();
      }

      @Override
      public void close() throws IOException {
        f.close();
      }
    };
  });

  List<String> storeFiles() throws IOException {
    try (Stream<Path> s = Files.list(store)) {
      return s.map(p -> p.getFileName().toString()).sorted().collect(Collectors.toList());
    }
  }

  ProxyDownloader.Result download(FakeProxy proxy, long maxBytes, long timeoutMillis) throws PluginException {
    return downloader.download(proxy.uri(), URL, Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, null,
        maxBytes, timeoutMillis);
  }

  /** A chunked body of 1 KiB chunks that never ends, one every {@code pauseMillis} (until the client goes). */
  static FakeProxy.Script endlessChunked(long pauseMillis) {
    return (req, out) -> {
      out.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Dragonfly-Task-ID: t\r\n\r\n"
          .getBytes(StandardCharsets.US_ASCII));
      byte[] chunk = new byte[1024];
      for (;;) {
        writeChunk(out, chunk);
        if (pauseMillis > 0) {
          HardLinkDownloadTest.sleep(pauseMillis);
        }
      }
    };
  }

  static void writeChunk(OutputStream out, byte[] chunk) throws IOException {
    out.write((Integer.toHexString(chunk.length) + "\r\n").getBytes(StandardCharsets.US_ASCII));
    out.write(chunk);
    out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
    out.flush();
  }

  @Test
  void theDefaultsAre256GiBAndOneHourAndTheSummaryShowsThem() throws Exception {
    assertEquals(256L * 1024 * 1024 * 1024, PluginConfig.DEFAULT_MAX_BYTES);
    assertEquals(3_600_000L, PluginConfig.DEFAULT_DOWNLOAD_TIMEOUT_MILLIS);
    String s3 = "\"object_storage\":{\"type\":\"s3\",\"bucket_name\":\"b\",\"access_key\":\"a\",\"secret_key\":\"s\"}";
    PluginConfig d = PluginConfig.parse("{" + s3 + "}", "c.json", store);
    assertEquals(PluginConfig.DEFAULT_MAX_BYTES, d.maxBytes());
    assertEquals(PluginConfig.DEFAULT_DOWNLOAD_TIMEOUT_MILLIS, d.downloadTimeoutMillis());
    assertTrue(d.toString().endsWith(" max_bytes=274877906944 download_timeout=1h"), d.toString());
    PluginConfig c = PluginConfig.parse("{\"max_bytes\":\"2GiB\",\"download_timeout\":\"90m\"," + s3 + "}", "c.json",
        store);
    assertTrue(c.toString().endsWith(" max_bytes=2147483648 download_timeout=90m"), c.toString());
  }

  @Test
  void anAnnouncedSizeAboveMaxBytesIs413BeforeAnythingIsWritten() throws Exception {
    byte[] body = new byte[1000];
    try (FakeProxy proxy = new FakeProxy(FakeProxy.ok(body, "X-Dragonfly-Task-ID: t"))) {
      PluginException e = assertThrows(PluginException.class, () -> download(proxy, 999, 60_000));
      assertEquals(413, e.status());
      assertTrue(e.getMessage().contains("max_bytes (999 bytes)"), e.getMessage());
      assertTrue(e.getMessage().contains("announced 1000 bytes"), e.getMessage());
      assertTrue(e.getMessage().contains("raise \"max_bytes\" in the plugin configuration"), e.getMessage());
      assertTrue(e.getMessage().contains(WHAT), e.getMessage());
      assertEquals(0, written.get());
      assertEquals(Collections.emptyList(), storeFiles());

      ProxyDownloader.Result r = download(proxy, 1000, 60_000);
      assertEquals(1000, r.bytes, "exactly max_bytes is allowed");
      assertArrayEquals(body, Files.readAllBytes(store.resolve("b.mar")));
    }
  }

  @Test
  void anEndlessChunkedBodyIsStoppedAtMaxBytesWithoutWritingPastIt() throws Exception {
    long max = 1024 * 1024 + 5;
    try (FakeProxy proxy = new FakeProxy(endlessChunked(0))) {
      PluginException e = assertThrows(PluginException.class, () -> download(proxy, max, 60_000));
      assertEquals(413, e.status());
      assertTrue(e.getMessage().contains("more than " + max + " bytes arrived"), e.getMessage());
      assertTrue(e.getMessage().contains("\"max_bytes\""), e.getMessage());
      assertTrue(written.get() <= max, written.get() + " bytes written");
      assertEquals(Collections.emptyList(), storeFiles(), "no partial file");
    }
  }

  @Test
  void aBodyWithoutLengthReadToTheEndIsBoundedToo() throws Exception {
    try (FakeProxy proxy = new FakeProxy((req, out) -> {
      out.write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
      out.write(new byte[4096]);
    })) {
      PluginException e = assertThrows(PluginException.class, () -> download(proxy, 4095, 60_000));
      assertEquals(413, e.status());
      assertEquals(Collections.emptyList(), storeFiles());
      assertEquals(4096, download(proxy, 4096, 60_000).bytes);
    }
  }

  @Test
  void aTricklingEndlessBodyEndsAtTheDeadlineWith504AndNoPartialFile() throws Exception {
    // A chunk every 50 ms: the 2 s idle-read time-out never fires.
    try (FakeProxy proxy = new FakeProxy(endlessChunked(50))) {
      long start = System.nanoTime();
      PluginException e = assertThrows(PluginException.class, () -> download(proxy, Long.MAX_VALUE - 1, 1_200));
      long millis = (System.nanoTime() - start) / 1_000_000;
      assertEquals(504, e.status());
      assertTrue(millis >= 1_100 && millis < 4_000, millis + " ms");
      assertTrue(e.getMessage().contains("did not finish within download_timeout (1200ms)"), e.getMessage());
      assertTrue(e.getMessage().contains("raise \"download_timeout\""), e.getMessage());
      java.util.regex.Matcher after =
          java.util.regex.Pattern.compile("stopped after (\\d+) bytes").matcher(e.getMessage());
      assertTrue(after.find() && Long.parseLong(after.group(1)) >= 10 * 1024, "it was downloading: " + e.getMessage());
      assertEquals(Collections.emptyList(), storeFiles(), "no partial file");
    }
  }

  @Test
  void theDeadlineCoversAProxyThatNeverAnswers() throws Exception {
    ProxyDownloader patient = new ProxyDownloader(2_000, 30_000);
    try (FakeProxy proxy = new FakeProxy((req, out) -> HardLinkDownloadTest.sleep(5_000))) {
      long start = System.nanoTime();
      PluginException e = assertThrows(PluginException.class, () -> patient.download(proxy.uri(), URL,
          Collections.emptyMap(), FILTER, store.resolve("b.mar"), WHAT, null, 1 << 20, 1_000));
      long millis = (System.nanoTime() - start) / 1_000_000;
      assertEquals(504, e.status());
      assertTrue(millis < 3_000, millis + " ms: the 30 s read time-out did not decide");
      assertTrue(e.getMessage().contains("download_timeout (1s)"), e.getMessage());
      assertFalse(Files.exists(store.resolve("b.mar")));
    }
  }
}
