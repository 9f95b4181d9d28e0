package io.peerload.plugin;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.Locale;

/**
 * The two kinds of URL in the configuration: the peer proxy's {@code addr} ({@code http://host:port}) and object
 * storage endpoints ({@code scheme://host[:port]}). Neither takes user info, a query or (for endpoints) a path.
 */
final class ConfigUrls {
  private ConfigUrls() {}

  /** {@code addr}: {@code http://host:port}, the port defaulting to 80; a bare {@code host:port} is accepted. */
  static URI parseAddr(String addr, String source) throws ConfigException {
    String a = addr.trim();
    if (!a.contains("://")) {
      a = "http://" + a; // "127.0.0.1:4001" is a common way to write it
    }
    URI u;
    try {
      u = new URI(a);
    } catch (URISyntaxException e) {
      throw new ConfigException(source + ": field \"addr\" is not a URL");
    }
    if (!"http".equalsIgnoreCase(u.getScheme())) {
      throw new ConfigException(source + ": field \"addr\" must be an http:// URL (the peer's proxy speaks plain HTTP)");
    }
    if (u.getHost() == null || u.getRawUserInfo() != null || !portInRange(u.getPort())) {
      throw new ConfigException(source + ": field \"addr\" must be http://host:port");
    }
    if ((u.getRawPath() != null && !u.getRawPath().isEmpty() && !u.getRawPath().equals("/")) || u.getRawQuery() != null) {
      throw new ConfigException(source + ": field \"addr\" must not have a path or query");
    }
    return URI.create("http://" + u.getHost() + ":" + (u.getPort() == -1 ? 80 : u.getPort()));
  }

  /** An object storage endpoint: {@code scheme://host[:port]}, trailing slashes dropped. */
  static String baseUrl(String value, String field, String source, boolean allowPath) throws ConfigException {
    URI u;
    try {
      u = new URI(trimSlash(value));
    } catch (URISyntaxException e) {
      throw new ConfigException(source + ": field \"" + field + "\" is not a URL");
    }
    String scheme = u.getScheme() == null ? "" : u.getScheme().toLowerCase(Locale.ROOT);
    if (!scheme.equals("http") && !scheme.equals("https")) {
      throw new ConfigException(source + ": field \"" + field + "\" must be an http:// or https:// URL");
    }
    if (u.getHost() == null || u.getRawUserInfo() != null || u.getRawQuery() != null || u.getRawFragment() != null
        || !portInRange(u.getPort())) {
      throw new ConfigException(source + ": field \"" + field + "\" must be scheme://host[:port]");
    }
    if (!allowPath && u.getRawPath() != null && !u.getRawPath().isEmpty()) {
      throw new ConfigException(source + ": field \"" + field + "\" must not have a path");
    }
    return scheme + "://" + u.getHost() + (u.getPort() == -1 ? "" : ":" + u.getPort());
  }

  /** java.net.URI takes any port number; the plugin could not connect to one outside 1-65535. */
  private static boolean portInRange(int port) {
    return port == -1 || (port >= 1 && port <= 65535);
  }

  private static String trimSlash(String s) {
    String t = s.trim();
    while (t.endsWith("/")) {
      t = t.substring(0, t.length() - 1);
    }
    return t;
  }
}
