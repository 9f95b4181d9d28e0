package io.peerload.plugin;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Downloads one signed object URL through the peer's HTTP proxy into a file, streaming (a few fixed buffers,
 * whatever the object size: {@link PipelinedCopy}), to a temporary file next to the target that is renamed
 * atomically on success and deleted on any failure.
 *
 * <p>A minimal HTTP/1.1 client is written here instead of using {@code HttpURLConnection} or {@code
 * java.net.http.HttpClient}: both send an {@code https://} URL through a proxy as a CONNECT tunnel, which hides the
 * URL and the X-Dragonfly-* headers from the peer proxy (it would have to intercept TLS). The peer proxy accepts the
 * absolute URL of either scheme on a plain HTTP connection and fetches the origin itself, which is what P2P needs.
 * Bounded connect and idle-read timeouts; no overall timeout, since a multi-GB model legitimately takes long.
 */
public final class ProxyDownloader {
  private static final Logger LOG = LoggerFactory.getLogger(ProxyDownloader.class);
  static final String USER_AGENT = "peerload-torchserve-plugin/0.1";
  private static final int MAX_HEAD = 64 * 1024;
  /** Reads the head a buffer at a time; the body goes around it, straight into the copy's buffers. */
  private static final int HEAD_BUFFER = 16 * 1024;
  private static final Pattern XML_CODE = Pattern.compile("<Code>([A-Za-z0-9._-]{1,64})</Code>");

  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;
  private final TempFiles files;

  public ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis) {
    // WRITE only, not TRUNCATE_EXISTING (createTempFile made the file, empty): on ext4 truncating a file, even an
    // empty one, marks it for auto_da_alloc, and then close() starts the writeback of the whole file on the calling
    // thread. That close took 0.3-0.45 s per GiB here (strace -T), about as much as the fsync removed earlier.
    this(connectTimeoutMillis, readTimeoutMillis, tmp -> FileChannel.open(tmp, StandardOpenOption.WRITE));
  }

  /** With another way of opening the temporary file for writing: tests make the writes fail. */
  ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis, TempFiles files) {
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
    this.files = files;
  }

  /** Opens the (existing, empty) temporary file for writing. */
  interface TempFiles {
    WritableByteChannel open(Path tmp) throws IOException;
  }

  /** What came back. */
  public static final class Result {
    public final Path file;
    public final long bytes;
    /** {@code X-Dragonfly-Task-ID}: present only when the daemon served the download through P2P. */
    public final String taskId;
    /**
     * Whether the daemon served it from its own storage: it sends {@code X-Dragonfly-Task-Download-Finished: true}
     * only then. FALSE when the download went through P2P without it: the bytes came from another peer (the seed
     * peer's cache, say) or the origin, and the daemon does not say which. Null when it did not go through P2P.
     */
    public final Boolean localHit;
    /**
     * TRUE when the file is a hard link of the daemon's own copy (nothing was read); FALSE when a hard link was
     * asked for and the body was streamed instead ({@link #hardLinkFallback} says why); null when none was asked.
     */
    public final Boolean hardLink;
    /** Why a hard link that was asked for was not used; null otherwise. */
    public final String hardLinkFallback;

    Result(Path file, long bytes, String taskId, Boolean localHit) {
      this(file, bytes, taskId, localHit, null, null);
    }

    Result(Path file, long bytes, String taskId, Boolean localHit, Boolean hardLink, String hardLinkFallback) {
      this.file = file;
      this.bytes = bytes;
      this.taskId = taskId;
      this.localHit = localHit;
      this.hardLink = hardLink;
      this.hardLinkFallback = hardLinkFallback;
    }

    Result withFallback(String why) {
      return new Result(file, bytes, taskId, localHit, Boolean.FALSE, why);
    }
  }

  /**
   * A hard link asked of the daemon for one request: it creates {@code daemonPath} (its view of the model store)
   * as a hard link of its cached file, which this process sees as {@code local}. The name is new for every
   * request, so the daemon never finds it taken (it refuses an existing path that is not the same inode).
   */
  static final class HardLinkRequest {
    final Path local;
    final String daemonPath;

    HardLinkRequest(Path modelStore, String daemonDir) {
      String name = ".p2p-" + UUID.randomUUID() + ".link";
      this.local = modelStore.resolve(name);
      this.daemonPath = (daemonDir.endsWith("/") ? daemonDir : daemonDir + "/") + name;
    }

    /** Removes the link if the daemon made it; it names the daemon's copy, so removing it never touches that. */
    void discard() {
      try {
        Files.deleteIfExists(local);
      } catch (IOException e) {
        LOG.warn("cannot remove the daemon's link {}: {}", local, reason(e));
      }
    }
  }

  /** The two filter headers: the current daemon's (comma-joined) and the legacy Go daemon's ({@code &}-joined). */
  public static Map<String, String> filterHeaders(List<String> filter) {
    Map<String, String> h = new LinkedHashMap<>();
    if (filter != null && !filter.isEmpty()) {
      h.put("X-Dragonfly-Filtered-Query-Params", String.join(",", filter));
      h.put("X-Dragonfly-Filter", String.join("&", filter));
    }
    return h;
  }

  /**
   * GETs {@code signedUrl} through {@code proxy} into {@code target}.
   *
   * @param what the object named for messages (bucket and key; never the signed URL)
   */
  public Result download(
      URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target, String what)
      throws PluginException {
    return download(proxy, signedUrl, headers, filter, target, what, null);
  }

  /**
   * As {@link #download(URI, String, Map, List, Path, String)}, but when {@code hardLinkDir} (the model store's
   * directory as the peer daemon sees it) is set, first asks the daemon to place its own copy in the model store
   * as a hard link ({@code X-Dragonfly-Output-Path} + {@code X-Dragonfly-Force-Hard-Link: true}, honoured by the
   * proxy of dragonfly-client 1.4+). The link is used only when the daemon says it served the task from its own
   * storage ({@code X-Dragonfly-Task-Download-Finished: true}) and the file has the announced size; the body is
   * then not read. On a download the daemon does not hold yet it makes the link too, but of a file it has only
   * allocated (full size, no content yet): that link is removed and the body streamed as usual. A refusal of the
   * daemon's own (cross-device link, unwritable directory; 500 with {@code X-Dragonfly-Error-Type: dfdaemon}) is
   * followed by the plain streamed download; an origin error is the origin's answer and is reported as such.
   */
  public Result download(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, String hardLinkDir) throws PluginException {
    if (hardLinkDir == null) {
      return fetch(proxy, signedUrl, headers, filter, target, what, null);
    }
    HardLinkRequest link = new HardLinkRequest(target.toAbsolutePath().getParent(), hardLinkDir);
    String[] refused = new String[1];
    try {
      Result r = fetch(proxy, signedUrl, headers, filter, target, what, link, refused);
      if (r != null) {
        return r;
      }
    } finally {
      link.discard(); // a no-op once moved into place
    }
    LOG.info("hard link of {} refused by the peer daemon ({}); downloading it the usual way", what, refused[0]);
    return fetch(proxy, signedUrl, headers, filter, target, what, null).withFallback(refused[0]);
  }

  private Result fetch(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, HardLinkRequest link) throws PluginException {
    return fetch(proxy, signedUrl, headers, filter, target, what, link, new String[1]);
  }

  /** One request; null (with the reason in {@code refused[0]}) when the daemon refused to make {@code link}. */
  private Result fetch(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, HardLinkRequest link, String[] refused) throws PluginException {
    URI origin = URI.create(signedUrl);
    String hostHeader = origin.getPort() == -1 ? origin.getHost() : origin.getHost() + ":" + origin.getPort();
    StringBuilder req = new StringBuilder(signedUrl.length() + 512);
    req.append("GET ").append(signedUrl).append(" HTTP/1.1\r\n");
    req.append("Host: ").append(hostHeader).append("\r\n");
    req.append("User-Agent: ").append(USER_AGENT).append("\r\n");
    req.append("Accept: */*\r\n");
    req.append("Accept-Encoding: identity\r\n");
    req.append("Connection: close\r\n");
    // Whatever the daemon's proxy.rules: without it a stock daemon sends the download straight to the origin.
    req.append(PluginConfig.USE_P2P_HEADER).append(": true\r\n");
    for (Map.Entry<String, String> e : filterHeaders(filter).entrySet()) {
      req.append(e.getKey()).append(": ").append(e.getValue()).append("\r\n");
    }
    for (Map.Entry<String, String> e : headers.entrySet()) {
      req.append(e.getKey()).append(": ").append(e.getValue()).append("\r\n");
    }
    if (link != null) {
      req.append(OUTPUT_PATH_HEADER).append(": ").append(link.daemonPath).append("\r\n");
      req.append(FORCE_HARD_LINK_HEADER).append(": true\r\n");
    }
    req.append("\r\n");

    String proxyName = "peer proxy at " + proxy;
    try (SocketChannel channel = SocketChannel.open(); Input in = new Input(channel, readTimeoutMillis)) {
      Socket socket = channel.socket();
      try {
        socket.connect(new InetSocketAddress(proxy.getHost(), proxy.getPort()), connectTimeoutMillis);
      } catch (UnknownHostException e) {
        throw PluginException.badGateway(proxyName + " is unreachable: unknown host " + proxy.getHost(), null, e);
      } catch (SocketTimeoutException e) {
        throw PluginException.badGateway(
            proxyName + " is unreachable: connect timed out after " + connectTimeoutMillis + " ms", null, e);
      } catch (IOException e) {
        throw PluginException.badGateway(proxyName + " is unreachable: " + reason(e), null, e);
      }
      socket.setTcpNoDelay(true);
      Head head;
      try {
        in.send(req.toString().getBytes(StandardCharsets.UTF_8));
        do {
          head = Head.read(in);
        } while (head.status >= 100 && head.status < 200);
      } catch (SocketTimeoutException e) {
        throw PluginException.badGateway(
            proxyName + " sent no response within " + readTimeoutMillis + " ms for " + what, null, e);
      } catch (IOException e) {
        throw PluginException.badGateway(proxyName + " failed before answering for " + what + ": " + reason(e), null, e);
      }

      String taskId = head.header("X-Dragonfly-Task-ID");
      String finished = head.header("X-Dragonfly-Task-Download-Finished");
      Boolean localHit = null; // not through P2P: nothing is known about a task
      if (finished != null && "true".equalsIgnoreCase(finished.trim())) {
        localHit = Boolean.TRUE;
      } else if (taskId != null) {
        localHit = Boolean.FALSE;
      }
      String errorType = head.header("X-Dragonfly-Error-Type");

      if (head.status != 200) {
        if (link != null && errorType != null && !"backend".equalsIgnoreCase(errorType)) {
          refused[0] = "HTTP " + head.status + ", " + errorType + " error; the daemon's log says why";
          return null;
        }
        throw failure(head.status, errorType, errorDetail(in, head), proxyName, what);
      }

      long expected = -1;
      boolean chunked = head.chunked();
      if (!chunked) {
        String cl = head.header("Content-Length");
        if (cl != null) {
          try {
            expected = Long.parseLong(cl.trim());
          } catch (NumberFormatException e) {
            throw PluginException.badGateway(proxyName + " sent an invalid Content-Length for " + what, errorType, e);
          }
        }
      }

      String fallback = null;
      if (link != null) {
        fallback = linkedFileProblem(link.local, localHit, chunked ? -1 : expected);
        if (fallback == null) {
          try {
            placeAtomically(link.local, target);
            // The body is not read: closing the connection ends it (the daemon stops sending; in client 1.4.2 a
            // failed send on a proxied download is only logged, so the task stays finished).
            return new Result(target, expected, taskId, localHit, Boolean.TRUE, null);
          } catch (IOException e) {
            fallback = "cannot move the daemon's link to " + target + ": " + reason(e);
          }
        }
        link.discard();
      }

      Path dir = target.toAbsolutePath().getParent();
      Path tmp;
      try {
        tmp = Files.createTempFile(dir, ".p2p-", ".part");
      } catch (IOException e) {
        throw PluginException.internal("cannot create a temporary file in the model store " + dir + ": " + reason(e), e);
      }
      boolean ok = false;
      try {
        long got;
        try (WritableByteChannel file = files.open(tmp)) {
          Body body = chunked ? new ChunkedInputStream(in) : in;
          // No fsync: the archive is read back by this process right after the rename, and the model store does
          // not outlive it (TorchServe forgets its models on restart). It cost 0.5 s per GiB (bench row 3).
          got = new PipelinedCopy(file, in::cancel).copy(body, expected, proxyName, what);
        }
        if (expected >= 0 && got != expected) {
          throw PluginException.badGateway(
              "download of " + what + " was truncated: received " + got + " of " + expected + " bytes", errorType, null);
        }
        placeAtomically(tmp, target);
        ok = true;
        return new Result(target, got, taskId, localHit, link == null ? null : Boolean.FALSE, fallback);
      } catch (IOException e) {
        throw PluginException.internal("cannot write " + target + ": " + reason(e), e);
      } finally {
        if (!ok) {
          try {
            Files.deleteIfExists(tmp);
          } catch (IOException ignored) {
            // best effort; the name starts with a dot and ends with .part, so it is never taken for a model
          }
        }
      }
    } catch (IOException e) {
      // closing the socket failed: nothing to report
      throw PluginException.internal("socket error: " + reason(e), e);
    }
  }

  static final String OUTPUT_PATH_HEADER = "X-Dragonfly-Output-Path";
  static final String FORCE_HARD_LINK_HEADER = "X-Dragonfly-Force-Hard-Link";

  /**
   * Why the daemon's link cannot be registered as the archive, or null when it can: only a task the daemon
   * already held (its file is complete), and a regular file of the announced size (a daemon that ignored the
   * header made none; a link to somewhere else than this model store does not show up here).
   */
  static String linkedFileProblem(Path link, Boolean localHit, long expected) {
    if (!Boolean.TRUE.equals(localHit)) {
      return Boolean.FALSE.equals(localHit)
          ? "not a local hit: the daemon's file is still being filled"
          : "the peer proxy did not serve it through P2P";
    }
    if (!Files.isRegularFile(link, LinkOption.NOFOLLOW_LINKS)) {
      return "the daemon made no file at " + link
          + " (a daemon that ignores X-Dragonfly-Output-Path, or hard_link_dir is not this model store)";
    }
    if (expected < 0) {
      return "the peer proxy sent no Content-Length to check the daemon's file against";
    }
    try {
      long size = Files.size(link);
      return size == expected ? null
          : "the daemon's file has " + size + " bytes, the response announced " + expected;
    } catch (IOException e) {
      return "cannot read the size of " + link + ": " + reason(e);
    }
  }

  private static void placeAtomically(Path from, Path target) throws IOException {
    try {
      Files.move(from, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (AtomicMoveNotSupportedException e) {
      Files.move(from, target, StandardCopyOption.REPLACE_EXISTING);
    }
  }

  /**
   * Explains a non-200 answer. The daemon (client 1.4) answers an origin error with the origin's status, {@code
   * X-Dragonfly-Error-Type: backend} and an EMPTY body, so the storage's own error code is usually unknown: the
   * status says what can be said. {@code proxy} and {@code dfdaemon} errors are the daemon's own (a 403 of type
   * proxy is its blocklist, not the origin).
   */
  static PluginException failure(int status, String errorType, String detail, String proxyName, String what) {
    boolean fromOrigin = errorType == null || "backend".equalsIgnoreCase(errorType);
    if (!fromOrigin) {
      String who = "dfdaemon".equalsIgnoreCase(errorType) ? "the peer daemon" : "the " + proxyName;
      String why = status == 403 && "proxy".equalsIgnoreCase(errorType)
          ? ": the daemon's blocklist refused the URL" : ": see the peer daemon's log";
      return new PluginException(502, who + " failed to download " + what + " (HTTP " + status + ", "
          + errorType + " error" + detail + ")" + why, errorType, null);
    }
    String answered = "backend".equalsIgnoreCase(errorType)
        ? "the origin answered " + status + " through the " + proxyName
            + (detail.isEmpty() ? " (no body is passed on)" : " (" + detail.substring(2) + ")")
        : "the " + proxyName + " answered " + status + detail.replaceFirst("^, ", " ");
    if (status == 404) {
      return new PluginException(404, what + " not found: " + answered, errorType, null);
    }
    if (status == 401 || status == 403) {
      return new PluginException(502, answered + ": the signed URL for " + what
          + " was refused — check the credentials, the bucket policy and the clock", errorType, null);
    }
    if (status == 400) {
      return new PluginException(502, answered + ": the object storage rejected the request for " + what
          + " — check the endpoint, region and bucket", errorType, null);
    }
    if (status == 429 || status == 503) {
      return new PluginException(503, answered + ": the object storage is throttling or unavailable; retry "
          + what + " later", errorType, null);
    }
    return new PluginException(502, "download of " + what + " failed: " + answered, errorType, null);
  }

  /** The body's read failures are the network's: 502, with how far it got. */
  static PluginException readFailure(IOException e, long total, String proxyName, String what) {
    if (e instanceof SocketTimeoutException) {
      return PluginException.badGateway("download of " + what + " stalled: no data from the " + proxyName
          + " for a read time-out (after " + total + " bytes)", null, e);
    }
    return PluginException.badGateway(
        "download of " + what + " failed after " + total + " bytes: " + reason(e), null, e);
  }

  /** A short, secret-free description of an error body: S3/OSS/Azure XML error code, or nothing. */
  private static String errorDetail(Input in, Head head) {
    try {
      byte[] buf = new byte[4096];
      InputStream body = head.chunked() ? new ChunkedInputStream(in) : in;
      int len = 0;
      int n;
      while (len < buf.length && (n = body.read(buf, len, buf.length - len)) > 0) {
        len += n;
      }
      Matcher m = XML_CODE.matcher(new String(buf, 0, len, StandardCharsets.UTF_8));
      return m.find() ? ", " + m.group(1) : "";
    } catch (IOException | RuntimeException e) {
      return "";
    }
  }

  static String reason(IOException e) {
    String m = e.getMessage();
    if (e instanceof ConnectException) {
      return m == null ? "connection refused" : m;
    }
    if (e instanceof EOFException) {
      return "connection closed early";
    }
    // Messages of socket and file errors name hosts and paths, never request contents.
    return e.getClass().getSimpleName() + (m == null ? "" : ": " + m);
  }

  /** Status line and headers of a response. */
  static final class Head {
    final int status;
    final List<String[]> headers;

    Head(int status, List<String[]> headers) {
      this.status = status;
      this.headers = headers;
    }

    String header(String name) {
      for (String[] h : headers) {
        if (h[0].equalsIgnoreCase(name)) {
          return h[1];
        }
      }
      return null;
    }

    boolean chunked() {
      String te = header("Transfer-Encoding");
      return te != null && te.toLowerCase(Locale.ROOT).contains("chunked");
    }

    static Head read(InputStream in) throws IOException {
      int[] budget = {MAX_HEAD};
      String statusLine = line(in, budget);
      // HTTP/1.1 200 OK
      String[] parts = statusLine.split(" ", 3);
      if (parts.length < 2 || !parts[0].startsWith("HTTP/")) {
        throw new IOException("not an HTTP response");
      }
      int status;
      try {
        status = Integer.parseInt(parts[1]);
      } catch (NumberFormatException e) {
        throw new IOException("not an HTTP status");
      }
      List<String[]> headers = new ArrayList<>();
      for (;;) {
        String l = line(in, budget);
        if (l.isEmpty()) {
          break;
        }
        int colon = l.indexOf(':');
        if (colon > 0) {
          headers.add(new String[] {l.substring(0, colon).trim(), l.substring(colon + 1).trim()});
        }
      }
      return new Head(status, headers);
    }

    private static String line(InputStream in, int[] budget) throws IOException {
      ByteArrayOutputStream b = new ByteArrayOutputStream(128);
      for (;;) {
        int c = in.read();
        if (c < 0) {
          throw new EOFException();
        }
        if (--budget[0] < 0) {
          throw new IOException("response head too large");
        }
        if (c == '\n') {
          byte[] bytes = b.toByteArray();
          int len = bytes.length > 0 && bytes[bytes.length - 1] == '\r' ? bytes.length - 1 : bytes.length;
          return new String(bytes, 0, len, StandardCharsets.ISO_8859_1);
        }
        b.write(c);
      }
    }
  }

  /** Where the body's bytes come from: the socket, or the chunk decoder over it; -1 at the end. */
  interface Body {
    int read(ByteBuffer dst) throws IOException;
  }

  /**
   * The response side of the connection. A non-blocking channel and a selector rather than a socket's stream with
   * SO_TIMEOUT, so that the body can be read straight into the copy's direct buffers (a blocking SocketChannel
   * ignores SO_TIMEOUT, and the stream of a socket reads into heap arrays through a temporary direct buffer), and
   * so that a failed file write can wake a read that waits for the network ({@link #cancel}).
   */
  static final class Input extends InputStream implements Body {
    private final SocketChannel channel;
    private final int timeoutMillis;
    /** Holds the head and the chunk-size lines; whatever body bytes it read ahead are handed over first. */
    private final ByteBuffer ahead = ByteBuffer.allocate(HEAD_BUFFER).flip();
    private volatile Selector selector; // cancel() runs on the writer thread
    private volatile boolean cancelled;

    Input(SocketChannel channel, int timeoutMillis) {
      this.channel = channel;
      this.timeoutMillis = timeoutMillis;
    }

    /** Sends the request (blocking: it fits in the socket's buffer), then switches to timed non-blocking reads. */
    void send(byte[] request) throws IOException {
      ByteBuffer b = ByteBuffer.wrap(request);
      while (b.hasRemaining()) {
        channel.write(b);
      }
      channel.configureBlocking(false);
      selector = Selector.open();
      channel.register(selector, SelectionKey.OP_READ);
    }

    /** Makes the current and every later read fail at once (the copy's writer failed: reading on is useless). */
    void cancel() {
      cancelled = true;
      Selector s = selector;
      if (s != null) {
        s.wakeup();
      }
    }

    @Override
    public int read() throws IOException {
      if (!ahead.hasRemaining()) {
        ahead.clear();
        int n = fill(ahead);
        ahead.flip();
        if (n < 0) {
          return -1;
        }
      }
      return ahead.get() & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      return len == 0 ? 0 : read(ByteBuffer.wrap(b, off, len));
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
      if (!dst.hasRemaining()) {
        return 0;
      }
      if (ahead.hasRemaining()) {
        int n = Math.min(ahead.remaining(), dst.remaining());
        ByteBuffer part = ahead.duplicate();
        part.limit(part.position() + n);
        dst.put(part);
        ahead.position(ahead.position() + n);
        return n;
      }
      return fill(dst);
    }

    /** One read of at least a byte, or -1; SocketTimeoutException when nothing came for the read time-out. */
    private int fill(ByteBuffer dst) throws IOException {
      long start = System.nanoTime();
      for (;;) {
        if (cancelled) {
          throw new IOException("cancelled");
        }
        int n = channel.read(dst);
        if (n != 0) {
          return n;
        }
        if (Thread.currentThread().isInterrupted()) {
          // select() returns at once on an interrupted thread: without this the loop would spin
          throw new InterruptedIOException("interrupted");
        }
        long waitMillis = 0; // no time-out
        if (timeoutMillis > 0) {
          long left = TimeUnit.MILLISECONDS.toNanos(timeoutMillis) - (System.nanoTime() - start);
          if (left <= 0) {
            throw new SocketTimeoutException("Read timed out");
          }
          waitMillis = Math.max(1, TimeUnit.NANOSECONDS.toMillis(left));
        }
        selector.select(waitMillis);
        selector.selectedKeys().clear();
      }
    }

    @Override
    public void close() throws IOException {
      if (selector != null) {
        selector.close();
      }
    }
  }

  /** Decodes {@code Transfer-Encoding: chunked}; a body cut before the last chunk is an error, not an EOF. */
  static final class ChunkedInputStream extends InputStream implements Body {
    private final Input in;
    private long remaining;
    private boolean done;

    ChunkedInputStream(Input in) {
      this.in = in;
    }

    @Override
    public int read() throws IOException {
      byte[] one = new byte[1];
      int n = read(one, 0, 1);
      return n < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      return len == 0 ? 0 : read(ByteBuffer.wrap(b, off, len));
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
      if (done) {
        return -1;
      }
      if (remaining == 0) {
        String size = Head.line(in, new int[] {4096});
        int semi = size.indexOf(';');
        try {
          remaining = Long.parseLong((semi < 0 ? size : size.substring(0, semi)).trim(), 16);
        } catch (NumberFormatException e) {
          throw new IOException("invalid chunk size");
        }
        if (remaining == 0) {
          // trailers, then the empty line
          int[] budget = {MAX_HEAD};
          while (!Head.line(in, budget).isEmpty()) {
            // skip
          }
          done = true;
          return -1;
        }
      }
      int limit = dst.limit();
      if (dst.remaining() > remaining) {
        dst.limit(dst.position() + (int) remaining);
      }
      int n;
      try {
        n = in.read(dst);
      } finally {
        dst.limit(limit);
      }
      if (n < 0) {
        throw new EOFException("chunked body truncated");
      }
      remaining -= n;
      if (remaining == 0) {
        Head.line(in, new int[] {2 + 1}); // CRLF after the chunk data
      }
      return n;
    }
  }
}
