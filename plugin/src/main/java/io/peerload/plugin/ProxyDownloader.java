package io.peerload.plugin;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Downloads one signed object URL through the peer's HTTP proxy into a file, streaming (a fixed 256 KiB buffer,
 * whatever the object size), to a temporary file next to the target that is renamed atomically on success and
 * deleted on any failure.
 *
 * <p>A minimal HTTP/1.1 client is written here instead of using {@code HttpURLConnection} or {@code
 * java.net.http.HttpClient}: both send an {@code https://} URL through a proxy as a CONNECT tunnel, which hides the
 * URL and the X-Dragonfly-* headers from the peer proxy (it would have to intercept TLS). The peer proxy accepts the
 * absolute URL of either scheme on a plain HTTP connection and fetches the origin itself, which is what P2P needs.
 * Bounded connect and idle-read timeouts; no overall timeout, since a multi-GB model legitimately takes long.
 */
public final class ProxyDownloader {
  static final String USER_AGENT = "peerload-torchserve-plugin/0.1";
  private static final int BUFFER = 256 * 1024;
  private static final int MAX_HEAD = 64 * 1024;
  private static final Pattern XML_CODE = Pattern.compile("<Code>([A-Za-z0-9._-]{1,64})</Code>");

  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;

  public ProxyDownloader(int connectTimeoutMillis, int readTimeoutMillis) {
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
  }

  /** What came back. */
  public static final class Result {
    public final Path file;
    public final long bytes;
    public final String taskId;
    public final Boolean cacheHit;

    Result(Path file, long bytes, String taskId, Boolean cacheHit) {
      this.file = file;
      this.bytes = bytes;
      this.taskId = taskId;
      this.cacheHit = cacheHit;
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
    URI origin = URI.create(signedUrl);
    String hostHeader = origin.getPort() == -1 ? origin.getHost() : origin.getHost() + ":" + origin.getPort();
    StringBuilder req = new StringBuilder(signedUrl.length() + 512);
    req.append("GET ").append(signedUrl).append(" HTTP/1.1\r\n");
    req.append("Host: ").append(hostHeader).append("\r\n");
    req.append("User-Agent: ").append(USER_AGENT).append("\r\n");
    req.append("Accept: */*\r\n");
    req.append("Accept-Encoding: identity\r\n");
    req.append("Connection: close\r\n");
    for (Map.Entry<String, String> e : filterHeaders(filter).entrySet()) {
      req.append(e.getKey()).append(": ").append(e.getValue()).append("\r\n");
    }
    for (Map.Entry<String, String> e : headers.entrySet()) {
      req.append(e.getKey()).append(": ").append(e.getValue()).append("\r\n");
    }
    req.append("\r\n");

    String proxyName = "peer proxy at " + proxy;
    try (Socket socket = new Socket()) {
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
      socket.setSoTimeout(readTimeoutMillis);
      socket.setTcpNoDelay(true);
      InputStream in;
      Head head;
      try {
        OutputStream out = socket.getOutputStream();
        out.write(req.toString().getBytes(StandardCharsets.UTF_8));
        out.flush();
        in = new BufferedInputStream(socket.getInputStream(), BUFFER);
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
      Boolean cacheHit = null; // unknown unless the peer says something about the task
      if (finished != null) {
        cacheHit = Boolean.valueOf("true".equalsIgnoreCase(finished.trim()));
      } else if (taskId != null) {
        cacheHit = Boolean.FALSE;
      }
      String errorType = head.header("X-Dragonfly-Error-Type");

      if (head.status != 200) {
        String detail = errorDetail(in, head);
        if (head.status == 404) {
          throw new PluginException(404, what + " not found (HTTP 404" + detail + ")", errorType, null);
        }
        String msg;
        if (head.status == 401 || head.status == 403) {
          msg = "object storage refused the signed URL for " + what + " (HTTP " + head.status + detail
              + "): check the credentials, the bucket policy and the clock";
        } else if (errorType != null) {
          msg = proxyName + " failed to download " + what + " (HTTP " + head.status + ", " + errorType + " error" + detail + ")";
        } else {
          msg = "download of " + what + " through the " + proxyName + " failed with HTTP " + head.status + detail;
        }
        throw new PluginException(502, msg, errorType, null);
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
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING)) {
          OutputStream file = Channels.newOutputStream(ch);
          InputStream body = chunked ? new ChunkedInputStream(in) : in;
          // No fsync: the archive is read back by this process right after the rename, and the model store does
          // not outlive it (TorchServe forgets its models on restart). It cost 0.5 s per GiB (bench row 3).
          got = copy(body, file, expected, proxyName, what);
        }
        if (expected >= 0 && got != expected) {
          throw PluginException.badGateway(
              "download of " + what + " was truncated: received " + got + " of " + expected + " bytes", errorType, null);
        }
        try {
          Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
          Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
        }
        ok = true;
        return new Result(target, got, taskId, cacheHit);
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

  /** Copies the body; read failures are the network's (502), write failures the disk's (IOException, 500). */
  private static long copy(InputStream in, OutputStream out, long expected, String proxyName, String what)
      throws PluginException, IOException {
    byte[] buf = new byte[BUFFER];
    long total = 0;
    for (;;) {
      int want = expected >= 0 ? (int) Math.min(buf.length, expected - total) : buf.length;
      if (want == 0) {
        return total;
      }
      int n;
      try {
        n = in.read(buf, 0, want);
      } catch (SocketTimeoutException e) {
        throw PluginException.badGateway(
            "download of " + what + " stalled: no data from the " + proxyName + " for a read time-out (after " + total + " bytes)",
            null, e);
      } catch (IOException e) {
        throw PluginException.badGateway(
            "download of " + what + " failed after " + total + " bytes: " + reason(e), null, e);
      }
      if (n < 0) {
        return total;
      }
      out.write(buf, 0, n);
      total += n;
    }
  }

  /** A short, secret-free description of an error body: S3/OSS/Azure XML error code, or nothing. */
  private static String errorDetail(InputStream in, Head head) {
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

  /** Decodes {@code Transfer-Encoding: chunked}; a body cut before the last chunk is an error, not an EOF. */
  static final class ChunkedInputStream extends InputStream {
    private final InputStream in;
    private long remaining;
    private boolean done;

    ChunkedInputStream(InputStream in) {
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
      int n = in.read(b, off, (int) Math.min(len, remaining));
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
