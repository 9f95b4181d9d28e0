package io.peerload.plugin;

import static io.peerload.plugin.DownloadFailures.reason;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.channels.FileChannel;
import java.nio.channels.SocketChannel;
import java.nio.channels.WritableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
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
 * Bounded connect and idle-read timeouts, and two bounds from the configuration: {@code download_timeout} for the
 * whole download (an endless body that keeps trickling never trips the idle-read time-out) and {@code max_bytes}
 * for its size (a body larger than announced, or of no announced size, would otherwise fill the disk). Either
 * stops the download and leaves nothing of it in the model store.
 */
public final class ProxyDownloader {
  private static final Logger LOG = LoggerFactory.getLogger(ProxyDownloader.class);
  static final String USER_AGENT = "peerload-torchserve-plugin/0.1";

  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;
  private final TempFiles files;
  private final ReadOnlyLink.Check readOnly;

  public ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis) {
    // WRITE only, not TRUNCATE_EXISTING (createTempFile made the file, empty): on ext4 truncating a file, even an
    // empty one, marks it for auto_da_alloc, and then close() starts the writeback of the whole file on the calling
    // thread. That close took 0.3-0.45 s per GiB here (strace -T), about as much as the fsync removed earlier.
    this(connectTimeoutMillis, readTimeoutMillis, tmp -> FileChannel.open(tmp, StandardOpenOption.WRITE));
  }

  /** With another way of opening the temporary file for writing: tests make the writes fail. */
  ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis, TempFiles files) {
    this(connectTimeoutMillis, readTimeoutMillis, files, ReadOnlyLink.PROCESS);
  }

  /** With another judge of whether the daemon's file is safe from this process: tests play a non-root server. */
  ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis, TempFiles files, ReadOnlyLink.Check readOnly) {
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
    this.files = files;
    this.readOnly = readOnly;
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

  /** {@code max_bytes} and the deadline of one download. */
  private static final class Limits {
    final long maxBytes;
    final long budgetMillis;
    final long deadlineNanos;

    Limits(long maxBytes, long budgetMillis) {
      this.maxBytes = maxBytes;
      this.budgetMillis = budgetMillis;
      this.deadlineNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(budgetMillis);
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
   * proxy of dragonfly-client 1.4+). The link is used only when the file has the announced size and this process
   * can neither write the daemon's file through the link nor make it writable ({@link ReadOnlyLink}: a model
   * handler must not be able to change what the daemon serves to other peers). When the daemon served the task from
   * its own storage ({@code X-Dragonfly-Task-Download-Finished: true}) the body is then not read. On a download the
   * daemon does not hold yet it links the file it has only allocated and is filling: the body is read to its end
   * without being written ({@link LinkedBody}), so the model store costs no write of its own, and the link is taken
   * when the file matches it. A refusal of the daemon's own (cross-device link, unwritable directory; 500 with
   * {@code X-Dragonfly-Error-Type: dfdaemon}), or a filled link that does not match the body, is followed by the
   * plain streamed download; an origin error is the origin's answer and is reported as such.
   */
  public Result download(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, String hardLinkDir) throws PluginException {
    return download(proxy, signedUrl, headers, filter, target, what, hardLinkDir, PluginConfig.DEFAULT_MAX_BYTES,
        PluginConfig.DEFAULT_DOWNLOAD_TIMEOUT_MILLIS);
  }

  /**
   * As {@link #download(URI, String, Map, List, Path, String, String)}, with the configuration's {@code max_bytes}
   * (413 past it) and {@code download_timeout} (504 past it, counted from now over every request this download
   * makes, the fallback after a refused hard link included).
   */
  public Result download(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, String hardLinkDir, long maxBytes, long timeoutMillis) throws PluginException {
    Limits limits = new Limits(maxBytes, timeoutMillis);
    if (hardLinkDir == null) {
      return fetch(proxy, signedUrl, headers, filter, target, what, null, limits);
    }
    DaemonHardLink link = new DaemonHardLink(target.toAbsolutePath().getParent(), hardLinkDir, readOnly);
    String[] refused = new String[1];
    try {
      Result r = fetch(proxy, signedUrl, headers, filter, target, what, link, refused, limits);
      if (r != null) {
        return r;
      }
    } finally {
      link.discard(); // a no-op once moved into place
    }
    LOG.info("hard link of {} not taken ({}); downloading it the usual way", what, refused[0]);
    return fetch(proxy, signedUrl, headers, filter, target, what, null, limits).withFallback(refused[0]);
  }

  private Result fetch(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, DaemonHardLink link, Limits limits) throws PluginException {
    return fetch(proxy, signedUrl, headers, filter, target, what, link, new String[1], limits);
  }

  /**
   * One request; null (with the reason in {@code refused[0]}) when the daemon refused to make {@code link}, or made
   * one that could not be taken after the body was read: the caller then downloads without a link.
   */
  private Result fetch(URI proxy, String signedUrl, Map<String, String> headers, List<String> filter, Path target,
      String what, DaemonHardLink link, String[] refused, Limits limits) throws PluginException {
    String req = requestHead(signedUrl, headers, filter, link);
    String proxyName = "peer proxy at " + proxy;
    long left = TimeUnit.NANOSECONDS.toMillis(limits.deadlineNanos - System.nanoTime());
    if (left <= 0) {
      throw DownloadFailures.deadline(new ResponseInput.DeadlineExceeded(limits.budgetMillis), 0, what);
    }
    try (SocketChannel channel = SocketChannel.open();
        ResponseInput in = new ResponseInput(channel, readTimeoutMillis, limits.deadlineNanos, limits.budgetMillis)) {
      Socket socket = channel.socket();
      try {
        socket.connect(new InetSocketAddress(proxy.getHost(), proxy.getPort()),
            (int) Math.min(connectTimeoutMillis > 0 ? connectTimeoutMillis : Integer.MAX_VALUE, left));
      } catch (UnknownHostException e) {
        throw PluginException.badGateway(proxyName + " is unreachable: unknown host " + proxy.getHost(), null, e);
      } catch (SocketTimeoutException e) {
        throw PluginException.badGateway(
            proxyName + " is unreachable: connect timed out after " + connectTimeoutMillis + " ms", null, e);
      } catch (IOException e) {
        throw PluginException.badGateway(proxyName + " is unreachable: " + reason(e), null, e);
      }
      socket.setTcpNoDelay(true);
      ResponseHead head;
      try {
        in.send(req.getBytes(StandardCharsets.UTF_8));
        do {
          head = ResponseHead.read(in);
        } while (head.status >= 100 && head.status < 200);
      } catch (ResponseInput.DeadlineExceeded e) {
        throw DownloadFailures.deadline(e, 0, what);
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
        refused[0] = link == null ? null : DaemonHardLink.refusal(head.status, errorType);
        if (refused[0] != null) {
          return null;
        }
        throw DownloadFailures.failure(
            head.status, errorType, DownloadFailures.errorDetail(in, head), proxyName, what);
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
      if (expected > limits.maxBytes) {
        // Refused before anything is written or a daemon's link is taken (the caller removes that link).
        throw DownloadFailures.tooLarge(what, "the peer proxy announced " + expected + " bytes", limits.maxBytes);
      }

      String fallback = null;
      if (link != null) {
        fallback = link.problem(localHit, chunked ? -1 : expected);
        if (fallback == null && !Boolean.TRUE.equals(localHit)) {
          // The daemon downloads the task into the file it linked: read the body to its end without writing it.
          LinkedBody body = new LinkedBody(expected);
          long got = body.drain(in, proxyName, what);
          if (got != expected) {
            throw truncated(what, got, expected, errorType);
          }
          String mismatch = body.mismatch(link.local);
          refused[0] = mismatch != null ? mismatch : link.moveTo(target);
          // The body is used up: a link that cannot be taken after all means a second, plain request.
          return refused[0] != null ? null : new Result(target, got, taskId, localHit, Boolean.TRUE, null);
        }
        if (fallback == null) {
          fallback = link.moveTo(target);
        }
        if (fallback == null) {
          // The body is not read: closing the connection ends it (the daemon stops sending; in client 1.4.2 a
          // failed send on a proxied download is only logged, so the task stays finished).
          return new Result(target, expected, taskId, localHit, Boolean.TRUE, null);
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
          ResponseBody body = chunked ? new ChunkedBody(in) : in;
          // No fsync: the archive is read back by this process right after the rename, and the model store does
          // not outlive it (TorchServe forgets its models on restart). It cost 0.5 s per GiB (bench row 3).
          got = new PipelinedCopy(file, in::cancel).copy(body, expected, limits.maxBytes, proxyName, what);
        }
        if (expected >= 0 && got != expected) {
          throw truncated(what, got, expected, errorType);
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

  private static PluginException truncated(String what, long got, long expected, String errorType) {
    return PluginException.badGateway(
        "download of " + what + " was truncated: received " + got + " of " + expected + " bytes", errorType, null);
  }

  /** The GET of the absolute URL, with the P2P, filter, configured and (when asked) hard-link headers. */
  private static String requestHead(
      String signedUrl, Map<String, String> headers, List<String> filter, DaemonHardLink link) {
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
      link.appendHeaders(req);
    }
    req.append("\r\n");
    return req.toString();
  }

  /** Renames into place, atomically where the file system can. */
  static void placeAtomically(Path from, Path target) throws IOException {
    try {
      Files.move(from, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (AtomicMoveNotSupportedException e) {
      Files.move(from, target, StandardCopyOption.REPLACE_EXISTING);
    }
  }
}
