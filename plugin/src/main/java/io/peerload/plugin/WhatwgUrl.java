package io.peerload.plugin;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The part of the WHATWG URL parse that decides a task id: the peer daemon parses every URL with Rust's {@code url}
 * crate (a WHATWG parser) before hashing it, so scheme and host are lower-cased, a default port dropped, the path's
 * dot segments resolved and its unsafe bytes percent-encoded. Written here because {@code java.net.URI} is an RFC
 * 2396 parser that rejects what WHATWG accepts (spaces, say) and normalises differently; only what the plugin's own
 * object URLs can hold (http and https with a host) is covered, and the query is left raw for the caller to split.
 */
final class WhatwgUrl {
  private static final char[] HEX = "0123456789ABCDEF".toCharArray();

  final String scheme;
  /** {@code [userinfo@]host[:port]}, host lower-cased, default port dropped. */
  final String authority;
  /** Never empty: {@code /} at least. */
  final String path;
  /** The raw query without {@code ?}, or null when the URL has none. */
  final String query;
  /** The encoded fragment without {@code #}, or null. */
  final String fragment;

  private WhatwgUrl(String scheme, String authority, String path, String query, String fragment) {
    this.scheme = scheme;
    this.authority = authority;
    this.path = path;
    this.query = query;
    this.fragment = fragment;
  }

  /** Parses an absolute http(s) URL; null when it is not one (the daemon would refuse it too). */
  static WhatwgUrl parse(String url) {
    String rest = url.trim();
    String fragment = null;
    int hash = rest.indexOf('#');
    if (hash >= 0) {
      fragment = encode(rest.substring(hash + 1), false);
      rest = rest.substring(0, hash);
    }
    String query = null;
    int q = rest.indexOf('?');
    if (q >= 0) {
      query = rest.substring(q + 1);
      rest = rest.substring(0, q);
    }
    int schemeEnd = rest.indexOf("://");
    if (schemeEnd <= 0) {
      return null;
    }
    String scheme = rest.substring(0, schemeEnd).toLowerCase(Locale.ROOT);
    if (!scheme.equals("http") && !scheme.equals("https")) {
      return null;
    }
    rest = rest.substring(schemeEnd + 3).replace('\\', '/');
    int slash = rest.indexOf('/');
    String authority = slash < 0 ? rest : rest.substring(0, slash);
    String rawPath = slash < 0 ? "" : rest.substring(slash);
    authority = normaliseAuthority(authority, scheme);
    if (authority == null) {
      return null;
    }
    return new WhatwgUrl(scheme, authority, normalisePath(rawPath), query, fragment);
  }

  /** scheme://authority/path (no query, no fragment). */
  String base() {
    return scheme + "://" + authority + path;
  }

  private static String normaliseAuthority(String authority, String scheme) {
    int at = authority.lastIndexOf('@');
    String user = at < 0 ? "" : authority.substring(0, at + 1);
    String hostPort = authority.substring(at + 1);
    String host = hostPort;
    String port = null;
    int colon = hostPort.lastIndexOf(':');
    if (colon >= 0 && hostPort.indexOf(']', colon) < 0) {
      host = hostPort.substring(0, colon);
      port = hostPort.substring(colon + 1);
    }
    if (host.isEmpty()) {
      return null;
    }
    StringBuilder out = new StringBuilder(user).append(host.toLowerCase(Locale.ROOT));
    if (port != null && !port.isEmpty()) {
      if (!port.matches("[0-9]{1,5}")) {
        return null;
      }
      int p = Integer.parseInt(port);
      if (p > 65535) {
        return null;
      }
      boolean isDefault = (scheme.equals("http") && p == 80) || (scheme.equals("https") && p == 443);
      if (!isDefault) {
        out.append(':').append(p);
      }
    }
    return out.toString();
  }

  private static String normalisePath(String raw) {
    if (raw.isEmpty()) {
      return "/";
    }
    List<String> out = new ArrayList<>();
    String[] segments = raw.substring(1).split("/", -1);
    for (int i = 0; i < segments.length; i++) {
      String s = segments[i];
      String lower = s.toLowerCase(Locale.ROOT);
      boolean last = i == segments.length - 1;
      if (lower.equals(".") || lower.equals("%2e")) {
        if (last) {
          out.add("");
        }
      } else if (lower.equals("..") || lower.equals(".%2e") || lower.equals("%2e.") || lower.equals("%2e%2e")) {
        if (!out.isEmpty()) {
          out.remove(out.size() - 1);
        }
        if (last) {
          out.add("");
        }
      } else {
        out.add(encode(s, true));
      }
    }
    return "/" + String.join("/", out);
  }

  /**
   * Percent-encodes per UTF-8 byte what the WHATWG path (or fragment) percent-encode set holds, as Rust's {@code
   * url} 2.5 does: controls, space, non-ASCII, {@code " < > `} and for paths also {@code # ? { }}; an existing
   * {@code %XX} stays.
   */
  private static String encode(String s, boolean path) {
    StringBuilder out = new StringBuilder(s.length() + 8);
    for (byte raw : s.getBytes(StandardCharsets.UTF_8)) {
      int b = raw & 0xff;
      boolean escape = b < 0x20 || b >= 0x7f || b == ' ' || b == '"' || b == '<' || b == '>' || b == '`'
          || (path && (b == '#' || b == '?' || b == '{' || b == '}'));
      if (escape) {
        out.append('%').append(HEX[b >> 4]).append(HEX[b & 0xf]);
      } else {
        out.append((char) b);
      }
    }
    return out.toString();
  }
}
