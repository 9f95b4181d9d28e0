package io.peerload.plugin;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The peer daemon's task identity (dragonflyoss/client, dragonfly-client-util id_generator): {@code
 * hex(sha256(canonical_url + tag? + application? + revision? + piece_length? + "STANDARD"))}. The same algorithm as
 * {@code src/storage/taskid.ts}; both are checked on {@code test/vectors/taskid.json}. The plugin logs the id it
 * expects next to the one the proxy reports, so a preheat that was not hit is easy to explain.
 */
public final class TaskId {
  private TaskId() {}

  /**
   * The filter the daemon applies when a request carries no filter header (dragonfly pkg/net/http), in the
   * manager's order. The same list as {@code DEFAULT_FILTERED_QUERY_PARAMS} in src/storage/taskid.ts (a vitest
   * test compares the two).
   */
  // daemon-default-filter:start
  public static final List<String> DAEMON_DEFAULT_FILTER = Collections.unmodifiableList(Arrays.asList(
      "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
      "X-Amz-Signature", "X-Amz-Security-Token", "X-Amz-User-Agent",
      "X-Goog-Algorithm", "X-Goog-Credential", "X-Goog-Date", "X-Goog-Expires", "X-Goog-SignedHeaders",
      "X-Goog-Signature",
      "OSSAccessKeyId", "Expires", "Signature", "SecurityToken",
      "AccessKeyId", "Signature", "Expires", "X-Obs-Date", "X-Obs-Security-Token",
      "q-sign-algorithm", "q-ak", "q-sign-time", "q-key-time", "q-header-list", "q-url-param-list", "q-signature",
      "x-cos-security-token",
      "ns"));
  // daemon-default-filter:end

  private static final Pattern SIZE = Pattern.compile("^\\s*([0-9]+(?:\\.[0-9]+)?)\\s*([a-zA-Z]*)\\s*$");
  private static final Map<String, Long> SIZE_UNITS = new HashMap<>();

  static {
    long[] values = {1, 1, 1000, 1000, 1024, 1024, 1000_000, 1000_000, 1L << 20, 1L << 20, 1000_000_000, 1000_000_000,
        1L << 30, 1L << 30};
    String[] names = {"", "b", "k", "kb", "ki", "kib", "m", "mb", "mi", "mib", "g", "gb", "gi", "gib"};
    for (int i = 0; i < names.length; i++) {
      SIZE_UNITS.put(names[i], values[i]);
    }
  }

  /**
   * The task id the daemon computes for a download the plugin sends: {@code filter} goes in both filter headers
   * when non-empty, and without any the daemon uses {@link #DAEMON_DEFAULT_FILTER}; a piece length only counts when
   * {@code X-Dragonfly-Piece-Length} parses (like {@code identityFromHeaders} in src/storage/taskid.ts).
   */
  public static String forRequest(String url, List<String> filter, String tag, String application, String pieceLength) {
    return compute(url, filter.isEmpty() ? DAEMON_DEFAULT_FILTER : filter, tag, application, null,
        parsePieceLength(pieceLength));
  }

  /**
   * Parses {@code X-Dragonfly-Piece-Length} ({@code 4194304}, {@code 4mib}, {@code 4 MiB}, {@code 4mb}) into bytes
   * like the daemon's byte-size parser; null when absent or not parsable.
   */
  static Long parsePieceLength(String raw) {
    if (raw == null) {
      return null;
    }
    Matcher m = SIZE.matcher(raw);
    if (!m.matches()) {
      return null;
    }
    Long unit = SIZE_UNITS.get(m.group(2).toLowerCase(Locale.ROOT));
    if (unit == null) {
      return null;
    }
    return new BigDecimal(m.group(1)).multiply(BigDecimal.valueOf(unit)).longValue();
  }

  /** Task id of a URL; optional parts may be null. */
  public static String compute(
      String url, Collection<String> filter, String tag, String application, String revision, Long pieceLength) {
    StringBuilder s = new StringBuilder(canonicalUrl(url, filter));
    if (tag != null && !tag.isEmpty()) {
      s.append(tag);
    }
    if (application != null && !application.isEmpty()) {
      s.append(application);
    }
    if (revision != null && !revision.isEmpty()) {
      s.append(revision);
    }
    if (pieceLength != null) {
      s.append(pieceLength.longValue());
    }
    s.append("STANDARD");
    return Crypto.sha256Hex(s.toString());
  }

  /**
   * The URL with the filtered query parameters removed: unchanged when the filter is empty; otherwise the query is
   * split on {@code &}, segments holding {@code ;} dropped, pairs form-decoded, filtered, stably sorted by key and
   * re-encoded like Go's {@code url.QueryEscape}; a root path loses its slash; the fragment is kept.
   */
  public static String canonicalUrl(String url, Collection<String> filter) {
    if (filter == null || filter.isEmpty()) {
      return url;
    }
    // Split by hand: java.net.URI rejects characters (spaces, say) the daemon's lenient WHATWG parser accepts.
    String rest = url;
    String fragment = null;
    int hash = rest.indexOf('#');
    if (hash >= 0) {
      fragment = rest.substring(hash + 1);
      rest = rest.substring(0, hash);
    }
    String rawQuery = null;
    int q = rest.indexOf('?');
    if (q >= 0) {
      rawQuery = rest.substring(q + 1);
      rest = rest.substring(0, q);
    }
    int schemeEnd = rest.indexOf("://");
    if (schemeEnd < 0) {
      return url; // not an absolute URL: the daemon could not parse it either
    }
    String scheme = rest.substring(0, schemeEnd).toLowerCase(Locale.ROOT);
    int pathStart = rest.indexOf('/', schemeEnd + 3);
    String authority = pathStart < 0 ? rest.substring(schemeEnd + 3) : rest.substring(schemeEnd + 3, pathStart);
    String path = pathStart < 0 ? "" : rest.substring(pathStart);
    Set<String> drop = new HashSet<>(filter);
    List<String[]> pairs = new ArrayList<>();
    if (rawQuery != null) {
      for (String segment : rawQuery.split("&", -1)) {
        if (segment.isEmpty() || segment.indexOf(';') >= 0) {
          continue;
        }
        int eq = segment.indexOf('=');
        String k = Encoding.formDecode(eq < 0 ? segment : segment.substring(0, eq));
        String v = eq < 0 ? "" : Encoding.formDecode(segment.substring(eq + 1));
        if (!drop.contains(k)) {
          pairs.add(new String[] {k, v});
        }
      }
    }
    pairs.sort(Comparator.comparing((String[] p) -> p[0])); // List.sort is stable
    StringBuilder out = new StringBuilder();
    out.append(scheme).append("://").append(authority.toLowerCase(Locale.ROOT));
    if (!path.equals("/")) {
      out.append(path);
    }
    if (!pairs.isEmpty()) {
      out.append('?');
      for (int i = 0; i < pairs.size(); i++) {
        if (i > 0) {
          out.append('&');
        }
        out.append(Encoding.formEncode(pairs.get(i)[0])).append('=').append(Encoding.formEncode(pairs.get(i)[1]));
      }
    }
    if (fragment != null) {
      out.append('#').append(fragment);
    }
    return out.toString();
  }
}
