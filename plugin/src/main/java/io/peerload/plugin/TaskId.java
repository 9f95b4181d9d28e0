package io.peerload.plugin;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
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
 * hex(sha256(canonical_url + tag? + application? + revision? + piece_length? + "STANDARD"))}, where the canonical
 * URL depends on the daemon version ({@link Rule}). The same algorithm as {@code src/storage/taskid.ts}; both are
 * checked on {@code test/vectors/taskid.json}, which holds every case's expected value under both rules. The plugin
 * logs the id it expects next to the one the proxy reports, so a preheat that was not hit is easy to explain.
 */
public final class TaskId {
  private TaskId() {}

  /** How a daemon version canonicalises the URL. */
  public enum Rule {
    /**
     * Clients before 1.5.3 (Dragonfly v2.5.1 bundles 1.4.2): the query keeps its order and is re-serialised as
     * application/x-www-form-urlencoded ({@code *} kept, {@code ~} and {@code ;} escaped); always parsed.
     */
    V1_4("1.4"),
    /**
     * Clients from 1.5.3 on and the manager: segments with {@code ;} dropped, keys sorted, Go {@code
     * url.QueryEscape}; an empty filter leaves the URL as it is.
     */
    V1_5_3("1.5.3+");

    private final String label;

    Rule(String label) {
      this.label = label;
    }

    @Override
    public String toString() {
      return label;
    }

    /**
     * The rule of a daemon version: {@code 1.4} or {@code 1.5.3+} as they are, or a client version such as {@code
     * 1.4.2} / {@code v1.5.3} compared with 1.5.3 (a pre-release suffix ignored); null when it is neither.
     */
    public static Rule forVersion(String version) {
      if (version == null) {
        return null;
      }
      String v = version.trim();
      if (v.equals("1.5.3+")) {
        return V1_5_3;
      }
      Matcher m = SEMVER.matcher(v);
      if (!m.matches()) {
        return null;
      }
      long major = Long.parseLong(m.group(1));
      long minor = Long.parseLong(m.group(2));
      long patch = m.group(3) == null ? 0 : Long.parseLong(m.group(3));
      boolean below = major != 1 ? major < 1 : minor != 5 ? minor < 5 : patch < 3;
      return below ? V1_4 : V1_5_3;
    }
  }

  private static final Pattern SEMVER =
      Pattern.compile("^v?([0-9]{1,9})\\.([0-9]{1,9})(?:\\.([0-9]{1,9}))?(?:-[0-9A-Za-z.-]+)?(?:\\+[0-9A-Za-z.-]+)?$");

  /**
   * The rule of the Dragonfly release peerload is tested against (v2.5.1, peer daemon client 1.4.2); the plugin
   * configuration's {@code daemon_version} changes it. The same default as DEFAULT_TASK_ID_RULE in
   * src/storage/taskid.ts.
   */
  public static final Rule DEFAULT_RULE = Rule.V1_4;

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
  public static String forRequest(
      String url, List<String> filter, String tag, String application, String pieceLength, Rule rule) {
    return compute(url, filter.isEmpty() ? DAEMON_DEFAULT_FILTER : filter, tag, application, null,
        parsePieceLength(pieceLength), rule);
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

  /** Task id of a URL under a daemon version's rule; optional parts may be null. */
  public static String compute(String url, Collection<String> filter, String tag, String application,
      String revision, Long pieceLength, Rule rule) {
    StringBuilder s = new StringBuilder(canonicalUrl(url, filter, rule));
    // Each part is appended only when set; an empty string appends nothing, exactly as in the daemon.
    if (tag != null) {
      s.append(tag);
    }
    if (application != null) {
      s.append(application);
    }
    if (revision != null) {
      s.append(revision);
    }
    if (pieceLength != null) {
      s.append(pieceLength.longValue());
    }
    s.append("STANDARD");
    return Crypto.sha256Hex(s.toString());
  }

  /**
   * The URL as the daemon hashes it. {@link Rule#V1_5_3}: unchanged when the filter is empty; otherwise the query is
   * split on {@code &}, segments holding {@code ;} dropped, pairs form-decoded, filtered, stably sorted by key (by
   * UTF-8 bytes) and re-encoded like Go's {@code url.QueryEscape}. {@link Rule#V1_4}: always parsed; pairs
   * form-decoded, filtered, kept in order and re-encoded as application/x-www-form-urlencoded. Both: no query when
   * none remain, a root path loses its slash, the fragment is kept. A URL that does not parse as http(s) is
   * returned unchanged.
   */
  public static String canonicalUrl(String url, Collection<String> filter, Rule rule) {
    boolean sorted = rule == Rule.V1_5_3;
    if (sorted && (filter == null || filter.isEmpty())) {
      return url;
    }
    WhatwgUrl parsed = WhatwgUrl.parse(url);
    if (parsed == null) {
      return url;
    }
    Set<String> drop = filter == null ? Collections.emptySet() : new HashSet<>(filter);
    List<String[]> pairs = new ArrayList<>();
    if (parsed.query != null) {
      for (String segment : parsed.query.split("&", -1)) {
        if (segment.isEmpty() || (sorted && segment.indexOf(';') >= 0)) {
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
    if (sorted) {
      pairs.sort(Comparator.comparing((String[] p) -> p[0], TaskId::compareUtf8)); // List.sort is stable
    }
    StringBuilder out = new StringBuilder(parsed.base());
    if (!pairs.isEmpty()) {
      out.append('?');
      for (int i = 0; i < pairs.size(); i++) {
        if (i > 0) {
          out.append('&');
        }
        String[] p = pairs.get(i);
        out.append(sorted ? Encoding.formEncode(p[0]) : Encoding.wwwFormEncode(p[0])).append('=')
            .append(sorted ? Encoding.formEncode(p[1]) : Encoding.wwwFormEncode(p[1]));
      }
    }
    if (parsed.fragment != null) {
      out.append('#').append(parsed.fragment);
    }
    String s = out.toString();
    if (parsed.path.equals("/") && s.endsWith("/")) {
      int end = s.length();
      while (end > 0 && s.charAt(end - 1) == '/') {
        end--;
      }
      s = s.substring(0, end);
    }
    return s;
  }

  /** Rust's {@code String} order: by UTF-8 bytes (Java compares UTF-16 units, which differs above U+FFFF). */
  private static int compareUtf8(String a, String b) {
    byte[] x = a.getBytes(StandardCharsets.UTF_8);
    byte[] y = b.getBytes(StandardCharsets.UTF_8);
    int n = Math.min(x.length, y.length);
    for (int i = 0; i < n; i++) {
      int c = Integer.compare(x[i] & 0xff, y[i] & 0xff);
      if (c != 0) {
        return c;
      }
    }
    return Integer.compare(x.length, y.length);
  }
}
