package io.peerload.plugin;

/**
 * A failure that maps to one HTTP status of the endpoint. The message is shown to the caller, so it must never
 * contain a secret (keys, signatures, signed URLs).
 */
public final class PluginException extends Exception {
  private static final long serialVersionUID = 1L;

  private final int status;
  private final String errorType;

  public PluginException(int status, String message) {
    this(status, message, null, null);
  }

  public PluginException(int status, String message, String errorType, Throwable cause) {
    super(message, cause);
    this.status = status;
    this.errorType = errorType;
  }

  /** HTTP status of the response. */
  public int status() {
    return status;
  }

  /** The peer proxy's {@code X-Dragonfly-Error-Type} (backend, proxy, dfdaemon), or null. */
  public String errorType() {
    return errorType;
  }

  public static PluginException badRequest(String message) {
    return new PluginException(400, message);
  }

  public static PluginException notFound(String message) {
    return new PluginException(404, message);
  }

  public static PluginException conflict(String message) {
    return new PluginException(409, message);
  }

  /** 413: the archive is larger than {@code max_bytes}; asking again gets the same answer until it is raised. */
  public static PluginException tooLarge(String message) {
    return new PluginException(413, message);
  }

  /** 504: the download did not finish within {@code download_timeout}. */
  public static PluginException gatewayTimeout(String message, Throwable cause) {
    return new PluginException(504, message, null, cause);
  }

  public static PluginException badGateway(String message, String errorType, Throwable cause) {
    return new PluginException(502, message, errorType, cause);
  }

  public static PluginException internal(String message, Throwable cause) {
    return new PluginException(500, message, null, cause);
  }
}
