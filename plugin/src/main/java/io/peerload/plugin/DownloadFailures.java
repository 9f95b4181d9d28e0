package io.peerload.plugin;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What a failed download through the peer proxy is reported as: the HTTP status the plugin answers with and a
 * message that says who failed (the origin, the proxy, the daemon, the network) and what to check. Nothing of a
 * signed URL or a response body reaches a message, except an object storage's XML error code.
 */
final class DownloadFailures {
  private static final Pattern XML_CODE = Pattern.compile("<Code>([A-Za-z0-9._-]{1,64})</Code>");

  private DownloadFailures() {}

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
    if (e instanceof ResponseInput.DeadlineExceeded) {
      return deadline((ResponseInput.DeadlineExceeded) e, total, what);
    }
    if (e instanceof SocketTimeoutException) {
      return PluginException.badGateway("download of " + what + " stalled: no data from the " + proxyName
          + " for a read time-out (after " + total + " bytes)", null, e);
    }
    return PluginException.badGateway(
        "download of " + what + " failed after " + total + " bytes: " + reason(e), null, e);
  }

  /** The overall deadline ran out: 504, naming the field to raise; nothing of the archive is kept. */
  static PluginException deadline(ResponseInput.DeadlineExceeded e, long total, String what) {
    return PluginException.gatewayTimeout("download of " + what + " did not finish within download_timeout ("
        + ConfigFields.formatMillis(e.budgetMillis) + ") and was stopped after " + total + " bytes; nothing of it "
        + "was kept. If the archive is this large or the network this slow, raise \"download_timeout\" in the "
        + "plugin configuration (e.g. \"2h\")", e);
  }

  /** The archive is larger than {@code max_bytes}: 413, naming the field to raise; nothing of it is kept. */
  static PluginException tooLarge(String what, String size, long maxBytes) {
    return PluginException.tooLarge(what + " is larger than max_bytes (" + maxBytes + " bytes): " + size
        + "; the download was stopped and nothing of it was kept. If the archive really is this large, raise "
        + "\"max_bytes\" in the plugin configuration (e.g. \"512GiB\")");
  }

  /** A short, secret-free description of an error body: S3/OSS/Azure XML error code, or nothing. */
  static String errorDetail(ResponseInput in, ResponseHead head) {
    try {
      byte[] buf = new byte[4096];
      InputStream body = head.chunked() ? new ChunkedBody(in) : in;
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
}
